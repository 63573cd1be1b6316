"""One writer per run: a second holder of a run's lock is refused in one line naming the first
(host, pid, since), a SIGKILLed holder's lock is taken over, and on an object store the lock is a
lease kept alive by its holder. Holders are real processes (fork), no Ray."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import multiprocessing as mp
import os
import re
import signal
import socket
import time
import uuid

import pyarrow.fs as pafs
import pytest

from orchestrator.errors import RunStopped, UsageError
from orchestrator.results import dataset, lock
from orchestrator.results.store import ResultStore
from tests.unit.test_store import _row

CTX = mp.get_context("fork")


def _hold(root: str, ready, done) -> None:
    store = ResultStore(root, "run-a")
    store.acquire()
    ready.set()
    done.wait(60)
    store.release()


def _holder_process(root: str):
    ready, done = CTX.Event(), CTX.Event()
    child = CTX.Process(target=_hold, args=(root, ready, done))
    child.start()
    assert ready.wait(60), "the holder did not take the lock"
    return child, done


def _since(message: str) -> dt.datetime:
    return dt.datetime.fromisoformat(re.search(r" since (\S+);", message).group(1))


def test_a_second_writer_is_refused_naming_the_holder(tmp_path):
    root = str(tmp_path / "res")
    child, done = _holder_process(root)
    try:
        t0 = dt.datetime.now(dt.timezone.utc)
        for wait_s in (0.0, 0.3):  # at once, and after waiting a little for it
            with pytest.raises(UsageError) as refused:
                ResultStore(root, "run-a").acquire(wait_s)
            message = str(refused.value)
            assert message.startswith(f"run run-a in {root} is being written by host {socket.gethostname()} "
                                      f"pid {child.pid} since ")
            assert "\n" not in message
            assert dt.timedelta(0) <= t0 - _since(message) < dt.timedelta(minutes=5)
        other = ResultStore(root, "run-b")  # another run of the same output is not held up
        other.acquire()
        other.release()
    finally:
        done.set()
        child.join(60)
    assert child.exitcode == 0
    store = ResultStore(root, "run-a")
    store.acquire()  # free once its holder let go
    assert json.loads((tmp_path / "res" / "_runs" / "run-a.lock").read_text())["pid"] == os.getpid()
    with pytest.raises(UsageError, match=f"by host {re.escape(socket.gethostname())} pid {os.getpid()} since"):
        ResultStore(root, "run-a").acquire()  # two stores of one process exclude each other too
    store.release()
    # the lock alone had created the output folder: letting go leaves nothing behind
    assert not (tmp_path / "res").exists()


def test_the_lock_leaves_the_rows_and_manifest_alone(tmp_path):
    root = str(tmp_path / "res")
    store = ResultStore(root, "run-a")
    store.acquire()
    store.create()
    store.write_group("r0-g0", [_row(0), _row(1)])
    store.write_manifest({"state": "running", "spec": "{}"})
    assert len(dataset.load(root)) == 2  # the lock file beside the manifest is not read as rows
    store.release()
    assert sorted(p.name for p in (tmp_path / "res" / "_runs").iterdir()) == ["run-a.json"]
    assert dataset.manifest(root, "run-a")["state"] == "running"


def test_the_lock_of_a_killed_holder_is_taken_over(tmp_path):
    root = str(tmp_path / "res")
    child, _ = _holder_process(root)
    os.kill(child.pid, signal.SIGKILL)
    child.join(60)
    assert child.exitcode == -signal.SIGKILL
    path = tmp_path / "res" / "_runs" / "run-a.lock"
    assert json.loads(path.read_text())["pid"] == child.pid  # its name is left, its lock is not
    store = ResultStore(root, "run-a")
    store.acquire()  # at once: the kernel let go of the dead holder's flock
    assert json.loads(path.read_text())["pid"] == os.getpid()
    with pytest.raises(UsageError, match=f"pid {os.getpid()} since"):
        ResultStore(root, "run-a").acquire(0.2)
    store.release()
    assert not path.exists()


@pytest.fixture()
def s3_output(s3_server, monkeypatch):
    query, creds = s3_server
    for key, value in creds.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(lock, "SETTLE_S", 0.05)
    return f"s3://cbresults/{uuid.uuid4().hex}{query}"  # moto's buckets outlive a server: a prefix per test


def _put_holder(store: ResultStore, holder: lock.Holder) -> None:
    with store.fs.open_output_stream(store.lock.path) as f:
        f.write(holder.to_json())


def _dead_pid() -> int:
    child = CTX.Process(target=os._exit, args=(0,))
    child.start()
    child.join(60)
    return child.pid


def test_object_store_lock_is_a_lease(s3_output, monkeypatch):
    first, second = ResultStore(s3_output, "run-a"), ResultStore(s3_output, "run-a")
    first.acquire()
    with pytest.raises(UsageError) as refused:
        second.acquire()
    assert f"is being written by host {socket.gethostname()} pid {os.getpid()} since " in str(refused.value)
    first.release()
    second.acquire()  # released: the lock object is gone
    second.release()

    now = dt.datetime.now(dt.timezone.utc)
    old = now - dt.timedelta(seconds=lock.LEASE_S + 30)
    cases = [  # (holder written in the lock object, taken over?)
        (lock.Holder(socket.gethostname(), _dead_pid(), now, now, "x" * 32), True),  # this host, pid gone
        (lock.Holder("elsewhere", 1, old, old, "y" * 32), True),  # another host, heartbeat past the lease
        (lock.Holder("elsewhere", 1, now, now, "z" * 32), False),  # another host, alive
    ]
    for holder, taken in cases:
        _put_holder(second, holder)
        if taken:
            second.acquire()
            second.release()
        else:
            with pytest.raises(UsageError, match=f"by host elsewhere pid 1 since {re.escape(now.isoformat())};"):
                second.acquire()


def test_object_store_holder_keeps_its_lease_and_learns_when_it_lost_it(s3_output, monkeypatch):
    monkeypatch.setattr(lock, "LEASE_S", 0.4)  # a heartbeat every 0.1 s: the thread is seen to beat at once
    first = ResultStore(s3_output, "run-a")
    first.acquire()
    since = first.lock._read().heartbeat
    deadline = time.monotonic() + 30
    while first.lock._read().heartbeat == since and time.monotonic() < deadline:
        time.sleep(0.02)
    assert first.lock._read().heartbeat > since, "the heartbeat thread did not renew the lease"
    # the heartbeat thread stopped first, then every beat made here: a taker's write and the holder's
    # renewal do not race (the test failed once under load while they did)
    first.lock._stop.set()
    first.lock._thread.join(timeout=30)
    assert not first.lock._thread.is_alive()
    monkeypatch.setattr(lock, "LEASE_S", 60.0)
    # taken longer ago than a lease, renewed since (as the thread renews it): still held, on no real wait
    taken = first.lock._me.since - dt.timedelta(seconds=lock.LEASE_S + 30)
    first.lock._me = dataclasses.replace(first.lock._me, since=taken)
    before = first.lock._read().heartbeat
    assert first.lock.beat_once() is True
    renewed = first.lock._read()
    assert renewed.since == taken and renewed.heartbeat >= before
    with pytest.raises(UsageError, match=f"pid {os.getpid()} since"):
        ResultStore(s3_output, "run-a").acquire()
    intruder = lock.Holder("elsewhere", 1, since, dt.datetime.now(dt.timezone.utc), "i" * 32)
    _put_holder(first, intruder)
    assert first.lock.beat_once() is False
    assert first.lock.lost == intruder
    with pytest.raises(RunStopped, match="its lock was taken over by host elsewhere pid 1 since") as stopped:
        first.write_group("r0-g0", [_row(0)])  # it writes nothing more
    assert stopped.value.exit_code == 1
    assert not first.fs.get_file_info(pafs.FileSelector(first.run_dir, allow_not_found=True))
    first.release()  # not its lock any more: the intruder's object stays
    assert first.lock._read().token == "i" * 32


def test_a_holder_whose_lock_object_vanished_learns_it_and_writes_nothing_more(s3_output, monkeypatch):
    """Issue 45: a lock object read as absent ended the heartbeat with `lost` None, so the holder
    lost its lease without learning it and went on writing."""
    monkeypatch.setattr(lock, "LEASE_S", 4.0)
    first = ResultStore(s3_output, "run-a")
    first.acquire()
    first.fs.delete_file(first.lock.path)  # deleted under it (an operator, a lifecycle rule)
    deadline = time.monotonic() + 30
    while first.lock.lost is None and time.monotonic() < deadline:  # the heartbeat thread finds out
        time.sleep(0.1)
    assert first.lock.lost is not None, "the heartbeat stopped without saying the lease was lost"
    assert isinstance(first.lock.lost, lock.Vanished)
    with pytest.raises(RunStopped, match="its lock object was deleted while it held it") as stopped:
        first.write_group("r0-g0", [_row(0)])
    assert stopped.value.exit_code == 1
    first.release()


def test_object_store_compaction_waits_for_the_lock(s3_output):
    store = ResultStore(s3_output, "run-a")
    store.create()
    for g in range(3):
        store.write_group(f"r0-g{g}", [{**_row(i), "group_id": f"r0-g{g}"} for i in range(2)])
    holder = ResultStore(s3_output, "run-a")
    holder.acquire()
    with pytest.raises(UsageError, match="is being written by"):
        store.compact(wait_s=0.3)
    holder.release()
    assert store.compact() == 3
    df = dataset.load(s3_output)
    assert sorted(zip(df.group_id, df.msg_bytes)) == [(f"r0-g{g}", 1024 * (i + 1)) for g in range(3) for i in range(2)]


def _run_then_hang(root: str, run_id: str, ready, done) -> None:
    store = ResultStore(root, run_id)
    store.acquire()
    store.write_manifest({"run_id": run_id, "state": "running", "spec": "{}", "command": "run",
                          "groups_total": 7})  # as a driver mid-run
    ready.set()
    done.wait(60)
    store.release()


def _killed_mid_run(tmp_path):
    """A run with rows on disk whose driver, holding its lock, was SIGKILLed; (root, its pid)."""
    from tests.synthetic import write_cluster_run

    root = str(tmp_path / "res")
    write_cluster_run(root, "run-k", nodes=3, ranks_per_node=1, patterns=("pairwise",), sizes=[1 << 20])
    ready, done = CTX.Event(), CTX.Event()
    child = CTX.Process(target=_run_then_hang, args=(root, "run-k", ready, done))
    child.start()
    assert ready.wait(60)
    return root, child


def _dead_driver(tmp_path):
    """As _killed_mid_run, the driver SIGKILLed."""
    root, child = _killed_mid_run(tmp_path)
    os.kill(child.pid, signal.SIGKILL)
    child.join(60)
    return root, child


def _edit_json(path: str, **fields) -> dict:
    """Set `fields` in the JSON object at `path`; the object as it was."""
    with open(path) as f:
        record = json.load(f)
    with open(path, "w") as f:
        json.dump({**record, **fields}, f)
    return record


def test_a_driver_killed_mid_run_has_its_manifest_marked_by_the_report(tmp_path):
    """scancel's srun kills a driver within milliseconds (tests/lab/test_slurm.py): its manifest
    stays `running`, its lock file names it and nobody holds it. While it runs the report says so
    and writes nothing; once it is killed the report marks the manifest `interrupted` with the groups
    on disk and who held it (`ended_by`), under the lock, and says how to resume; a second report
    finds it marked; a resume taking the lock leaves nothing behind."""
    from orchestrator.operations.report import read_report, run_frame
    from orchestrator.results.left_behind import left_behind

    root, child = _killed_mid_run(tmp_path)
    frame = run_frame(root, "run-k")
    groups = frame.df.group.nunique()
    assert groups == 3  # three pairs
    assert any(w.startswith("the run is still running, or its driver died") for w in read_report(root, frame).warnings)
    assert dataset.manifest(root, "run-k")["state"] == "running"  # held: it may still run, nothing written
    os.kill(child.pid, signal.SIGKILL)
    child.join(60)
    holder = left_behind(ResultStore(root, "run-k").lock)
    assert (holder.host, holder.pid) == (socket.gethostname(), child.pid)
    said = [w for w in read_report(root, frame).warnings if w.startswith("the run was interrupted")]
    record = dataset.manifest(root, "run-k")
    assert (record["state"], record["groups_done"], record["groups_total"]) == ("interrupted", groups, 7)
    assert record["ended_by"].startswith(f"its driver was killed without marking its manifest, {holder.describe()}; "
                                         "marked by collbench report at ")
    assert said == [f"the run was interrupted after {groups} of 7 groups ({record['ended_by']}): resume it with "
                    "collbench run --resume run-k"]
    assert left_behind(ResultStore(root, "run-k").lock) == holder  # the lock file kept as the driver left it
    assert [w for w in read_report(root, frame).warnings if w.startswith("the run was interrupted")] == said
    assert dataset.manifest(root, "run-k") == record  # marked once
    store = ResultStore(root, "run-k")
    store.acquire()  # a resume takes the lock: held, nothing left behind
    assert left_behind(store.lock) is None
    store.release()


def test_a_killed_driver_s_manifest_that_cannot_be_written_is_said_gone(tmp_path, monkeypatch):
    """A dataset the reader cannot write (another user's, read-only storage): the manifest stays as it
    is and the report says the driver is gone, from its lock."""
    from orchestrator.operations.report import read_report, run_frame
    from orchestrator.results import left_behind

    root, child = _dead_driver(tmp_path)

    def refused(folder, path, fields):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(left_behind, "_patch", refused)
    said = [w for w in read_report(root, run_frame(root, "run-k")).warnings if "driver" in w]
    assert len(said) == 1 and said[0].startswith(
        f"the run's driver is gone, killed without marking its manifest (its lock, held by host "
        f"{socket.gethostname()} pid {child.pid} since ") and said[0].endswith(
        "is free): the report covers the groups on disk; resume it with collbench run --resume run-k"), said
    assert dataset.manifest(root, "run-k")["state"] == "running"


def test_a_free_lock_of_another_host_is_said_never_marked(tmp_path):
    """flock may not reach across hosts (NFS with local locks): a free lock naming a process of
    another host proves nothing about that process, so the report says what the lock says and
    writes nothing; every key of the manifest stays as written, a newer collbench's included."""
    from orchestrator.operations.report import read_report, run_frame

    root, child = _dead_driver(tmp_path)
    _edit_json(os.path.join(root, "_runs", "run-k.lock"), host="gpu-a17")
    manifest = os.path.join(root, "_runs", "run-k.json")
    before = open(manifest).read()
    said = [w for w in read_report(root, run_frame(root, "run-k")).warnings if "driver" in w]
    assert len(said) == 1 and said[0].startswith("the run's driver is gone, killed without marking its manifest "
                                                 f"(its lock, held by host gpu-a17 pid {child.pid} since "), said
    assert open(manifest).read() == before


def test_marking_a_killed_driver_s_manifest_keeps_every_key_it_does_not_set(tmp_path):
    """The manifest file is patched, not rewritten from what this collbench knows: a key of a newer
    collbench stays; a manifest of a newer schema is not touched."""
    from orchestrator.operations.report import read_report, run_frame

    root, child = _dead_driver(tmp_path)
    manifest = os.path.join(root, "_runs", "run-k.json")
    record = _edit_json(manifest, from_a_newer_collbench=[1, 2])
    read_report(root, run_frame(root, "run-k"))
    marked = json.loads(open(manifest).read())
    assert marked["from_a_newer_collbench"] == [1, 2] and marked["state"] == "interrupted"
    set_ = ("state", "groups_done", "ended_by")
    assert {k: v for k, v in marked.items() if k not in set_} == \
        {k: v for k, v in {**record, "from_a_newer_collbench": [1, 2]}.items() if k not in set_}
    _edit_json(manifest, **{**record, "schema_version": 99})  # running again, of a newer schema
    read_report(root, run_frame(root, "run-k"))
    assert json.loads(open(manifest).read())["state"] == "running"
