"""Compaction against its two hazards: a second compaction of the same run at the same time, and
a crash at any point. Compactions run in real processes (fork); a crash is os._exit at a step
boundary (compact.after_step). After each: every row read exactly once by collbench's reader,
pyarrow.dataset and pandas, and the next compaction succeeds."""

from __future__ import annotations

import collections
import errno
import multiprocessing as mp
import os

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from orchestrator.errors import UsageError
from orchestrator.results import compact as compaction
from orchestrator.results import dataset
from orchestrator.results import location as layout
from orchestrator.results.store import ResultStore
from tests.unit.test_store import _row

CTX = mp.get_context("fork")
TRIALS = 25  # each trial forks two real compactions that race (~0.2 s a trial)
GROUPS, ROWS = 6, 2  # rows per group
CRASHED = 77  # the exit code of a compaction killed at a step


def _write_run(root: str) -> list[tuple]:
    """A run of GROUPS group files; returns the (group_id, msg_bytes, status) of its rows."""
    store = ResultStore(root, "run-a")
    store.create()
    for g in range(GROUPS):
        store.write_group(f"r0-g{g}", [{**_row(i), "group_id": f"r0-g{g}"} for i in range(ROWS)])
    return sorted((f"r0-g{g}", 1024 * (i + 1), "ok") for g in range(GROUPS) for i in range(ROWS))


def _seen(root: str, readers: tuple[str, ...] = ("collbench", "pyarrow", "pandas")) -> dict[str, list[tuple]]:
    columns = ["group_id", "msg_bytes", "status"]
    tables = {
        "collbench": lambda: dataset.load(root, columns=columns),
        "pyarrow": lambda: ds.dataset(root).to_table(columns=columns).to_pandas(),
        "pandas": lambda: pd.read_parquet(root, columns=columns),
    }
    return {name: sorted(map(tuple, tables[name]()[columns].itertuples(index=False))) for name in readers}


def _compact_at_the_signal(root: str, start, results) -> None:
    start.wait(60)
    try:
        results.put(ResultStore(root, "run-a").compact())
    except (OSError, UsageError, pa.ArrowException) as e:  # what the old compaction raised; the test names it
        results.put(repr(e))


def test_two_compactions_of_one_run_at_once(tmp_path):
    outcomes = collections.Counter()
    for trial in range(TRIALS):
        root = str(tmp_path / f"t{trial}")
        rows = _write_run(root)
        start, results = CTX.Barrier(2), CTX.Queue()
        procs = [CTX.Process(target=_compact_at_the_signal, args=(root, start, results)) for _ in range(2)]
        for p in procs:
            p.start()
        merged = sorted(str(results.get(timeout=120)) for _ in procs)
        for p in procs:
            p.join(60)
        outcomes[tuple(merged)] += 1
        # one merged every group file, the other found nothing left to merge; no error
        assert merged == ["0", str(GROUPS)], (trial, merged)
        assert _seen(root) == dict.fromkeys(["collbench", "pyarrow", "pandas"], rows), trial
        assert sorted(os.listdir(os.path.join(root, "run-a"))) == ["part-00000.parquet"]
        assert not [n for n in os.listdir(root) if n.startswith(".")]  # no staging folder left
    print(f"{TRIALS} trials of two compactions at once: {dict(outcomes)}")


def _compact_and_die(root: str, at: int) -> None:
    steps = []

    def crash(step: str) -> None:
        steps.append(step)
        if len(steps) == at + 1:
            os._exit(CRASHED)

    compaction.after_step = crash
    ResultStore(root, "run-a").compact()
    os._exit(0)


def _steps(root: str) -> list[str]:
    """The step boundaries of one compaction of the run at `root`, recorded."""
    steps: list[str] = []
    compaction.after_step = steps.append
    try:
        ResultStore(root, "run-a").compact()
    finally:
        compaction.after_step = compaction._no_crash
    return steps


def _retried(root: str) -> list[tuple]:
    """A compacted run whose groups 1 and 4 failed and were measured again (--retry-failed)."""
    store = ResultStore(root, "run-a")
    store.create()
    for g in range(GROUPS):
        store.write_group(f"r0-g{g}", [{**_row(i), "group_id": f"r0-g{g}", "status": "failed"} for i in range(ROWS)])
    store.compact()
    for g in (1, 4):
        store.write_group(f"r0-g{g}", [{**_row(i), "group_id": f"r0-g{g}"} for i in range(ROWS)])
    return sorted((f"r0-g{g}", 1024 * (i + 1), "ok" if g in (1, 4) else "failed")
                  for g in range(GROUPS) for i in range(ROWS))


@pytest.mark.parametrize("path, make_run", [
    ("exchange", _write_run),  # local disk: staged parts swapped in by renameat2
    ("write then delete", _write_run),  # object stores (and no renameat2): parts put, then group files deleted
    ("write then delete", _retried),  # ... over older parts, some of whose groups were measured again
])
def test_a_compaction_killed_at_every_step(tmp_path, monkeypatch, path, make_run):
    monkeypatch.setattr(layout, "PART_ROWS", 5)  # 12 rows: three part files, a step after each
    if path == "write then delete":
        monkeypatch.setattr(compaction, "_exchange", None)
    elif compaction._exchange is None:
        pytest.skip("no renameat2 on this platform")
    make_run(str(tmp_path / "dry"))
    steps = _steps(str(tmp_path / "dry"))
    assert steps[0] == "locked" and steps.count("part-written") >= 1 and steps.count("old-file-deleted") >= 2
    if make_run is _write_run:
        assert steps.count("part-written") == 3
    elif path == "write then delete":
        assert steps.count("part-rewritten") == 2  # groups 1 and 4 are in two of the three older parts
    # collbench's reader reads each row once at every point; the others only where the swap is atomic
    readers = ("collbench", "pyarrow", "pandas") if path == "exchange" else ("collbench",)
    for at, step in enumerate(steps):
        root = str(tmp_path / f"at{at}")
        rows = make_run(root)
        child = CTX.Process(target=_compact_and_die, args=(root, at))
        child.start()
        child.join(120)
        assert child.exitcode == CRASHED, (at, step, child.exitcode)
        assert _seen(root, readers) == dict.fromkeys(readers, rows), (at, step)
        ResultStore(root, "run-a").compact()  # takes the dead compaction's lock and clears its leftovers
        assert _seen(root) == dict.fromkeys(["collbench", "pyarrow", "pandas"], rows), (at, step)
        assert all(n.startswith("part-") for n in os.listdir(os.path.join(root, "run-a"))), (at, step)
        assert sorted(os.listdir(root)) == ["_runs", "run-a"], (at, step)  # no staging, no lock left


def test_a_filesystem_that_cannot_exchange_compacts_by_writing_then_deleting(tmp_path, monkeypatch):
    """NFS and FUSE mounts answer renameat2(RENAME_EXCHANGE) with EINVAL or ENOTSUP: the compaction
    falls back to part files first, then the group files removed; every row once, nothing left."""
    root = str(tmp_path / "nfs")
    expected = _write_run(root)

    def refuse(a: str, b: str) -> None:
        raise OSError(errno.EINVAL, f"renameat2 exchange {a} <-> {b}: Invalid argument")

    monkeypatch.setattr(compaction, "_exchange", refuse)
    assert ResultStore(root, "run-a").compact() == GROUPS
    assert sorted(os.listdir(os.path.join(root, "run-a"))) == ["part-00000.parquet"]
    assert all(rows == expected for rows in _seen(root).values())
    assert not [n for n in os.listdir(root) if n.startswith(".")]  # no staging folder left
