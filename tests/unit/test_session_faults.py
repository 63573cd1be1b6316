"""Session's answers to faults, without Ray: the exit code of a SIGTERM that Ray turned into a plain
KeyboardInterrupt, and the one line of a full disk."""

from __future__ import annotations

import datetime as dt
import errno
import os
import signal

import pytest

from orchestrator.execution import signals
from orchestrator.execution.session import Session, is_disk_full
from orchestrator.execution.signals import exit_code
from orchestrator.sweep.spec import SweepSpec


def test_sigterm_exits_143_even_when_ray_raised_a_plain_keyboard_interrupt():
    previous = signals.install()
    try:
        assert exit_code(KeyboardInterrupt()) == 130  # Ctrl-C
        with pytest.raises(KeyboardInterrupt):
            signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
        # ray.wait re-raises a new KeyboardInterrupt in place of the handler's Terminated
        assert exit_code(KeyboardInterrupt()) == 143
    finally:
        signals.restore(previous)


def test_sigusr1_asks_for_a_stop_after_the_round_and_a_new_session_forgets_it():
    before = signal.getsignal(signal.SIGUSR1)  # the default, or the command line's (run_main installs it)
    previous = signals.install()
    try:
        assert not signals.stop_requested()
        signal.raise_signal(signal.SIGUSR1)  # the handler only notes it: nothing raised mid-round
        assert signals.stop_requested() and exit_code(signals.StopRequested()) == 138
        signals.restore(signals.install())
        assert not signals.stop_requested()
    finally:
        signals.restore(previous)
    assert signal.getsignal(signal.SIGUSR1) == before


def _session(tmp_path) -> Session:
    return Session(SweepSpec(output=str(tmp_path / "out")), "run-1", dt.datetime.now(dt.timezone.utc))


def test_a_full_disk_before_the_manifest_says_nothing_was_measured(tmp_path):
    s = _session(tmp_path)
    line = s.stopped_by_full_disk(OSError(errno.ENOSPC, "No space left on device"))
    assert line.startswith(f"no space left on device writing {tmp_path}/out/run-1 (")
    assert line.endswith(" free); nothing was measured")


def test_a_full_disk_marks_the_manifest_interrupted_or_says_it_could_not(tmp_path, monkeypatch):
    s = _session(tmp_path)
    s.store.create()
    s.manifest = {"state": "running", "groups_total": 3, "groups_done": 1}  # one behind what is on disk
    for group in ("r0-g0", "r1-g0"):
        s.store.write_group(group, [{"run_id": "run-1", "group_id": group, "status": "ok"}])
    line = s.stopped_by_full_disk(OSError(errno.ENOSPC, "No space left on device"))
    assert line.endswith(f"free); 2 finished group(s) kept in {tmp_path}/out")  # counted on disk
    from orchestrator.results import dataset
    assert dataset.manifest(str(tmp_path / "out"), "run-1")["state"] == "interrupted"

    def full(manifest):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(s.store, "write_manifest", full)
    line = s.stopped_by_full_disk(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert line.endswith("(its manifest could not be marked interrupted: no space for it either)")


def test_a_failed_write_leaves_no_temporary_file_and_its_folder_is_named(tmp_path, monkeypatch):
    s = _session(tmp_path)
    s.store.create()
    from orchestrator.results import run_folder
    real_replace = run_folder.os.replace

    def no_room(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device", src)

    monkeypatch.setattr(run_folder.os, "replace", no_room)
    with pytest.raises(OSError) as raised:  # the manifest and a group file: each written through a temporary
        s.store.write_manifest({"run_id": "run-1", "state": "running", "groups_total": 3, "groups_done": 1})
    with pytest.raises(OSError):
        s.store.write_group("r0-g0", [{"run_id": "run-1", "group_id": "r0-g0", "status": "ok"}])
    monkeypatch.setattr(run_folder.os, "replace", real_replace)
    assert not list((tmp_path / "out").rglob(".*.tmp"))  # the room it took is given back
    s.manifest = {"state": "running", "groups_total": 3, "groups_done": 1}
    line = s.stopped_by_full_disk(raised.value)
    assert line.startswith(f"no space left on device writing {tmp_path / 'out' / '_runs'} (")


def test_only_a_want_of_space_is_a_full_disk():
    assert is_disk_full(OSError(errno.ENOSPC, "x")) and is_disk_full(OSError(errno.EDQUOT, "x"))
    assert not is_disk_full(OSError(errno.EACCES, "x")) and not is_disk_full(ConnectionError())


def test_an_interrupt_quiets_rays_unhandled_errors_of_the_groups_left_until_the_session_ends(tmp_path, monkeypatch):
    """scancel killed a rank's peers mid-group: Ray printed the other rank's gloo "Connection closed
    by peer" as an "Unhandled error" after the interrupted line (lab Slurm, 2026-12-05 18:56). The
    interrupt sets Ray's own switch, read when it would print one; the session's end puts it back."""
    import ray._private.worker as ray_worker

    from orchestrator.execution.session import QUIET_ERRORS

    monkeypatch.delenv(QUIET_ERRORS, raising=False)
    s = _session(tmp_path)
    s.store.create()
    s.manifest = {"state": "running", "groups_total": 3, "groups_done": 0}
    s.interrupted()
    assert os.environ[QUIET_ERRORS] == "1"
    printed = []
    monkeypatch.setattr(ray_worker, "_unhandled_error_handler", printed.append)
    worker = ray_worker.Worker.__new__(ray_worker.Worker)
    monkeypatch.setattr(worker, "deserialize_objects", lambda objects, refs: [RuntimeError("closed by peer")],
                        raising=False)
    worker.raise_errors([b""], [None])  # Ray's own path for an error nobody got
    assert printed == []
    s._signals = signals.install()
    s.store.acquire()
    s.__exit__(None, None, None)
    assert QUIET_ERRORS not in os.environ  # as it was
    worker.raise_errors([b""], [None])
    assert [str(e) for e in printed] == ["closed by peer"]
