"""A run whose driver is gone without letting go of its lock (results/lock.py): killed outright
(SIGKILL, the OOM killer, srun ending a cancelled Slurm job's step within milliseconds), so its
manifest still says `running`. A reader that finds one (`collbench report`, which a Slurm batch script
runs as scancel ends its job) marks its manifest `interrupted` itself, under the run's lock, with who
held it (`ended_by`): from then on the manifest says how the run ended, and `--resume` finishes it."""

from __future__ import annotations

import datetime as dt
import fcntl
import os
import posixpath

import pyarrow as pa
import pyarrow.fs as pafs

from orchestrator.errors import UsageError
from orchestrator.results.lock import LEASE_S, Holder, LocalLock, ObjectLock
from orchestrator.results.schema import RunState


def left_behind(lock: LocalLock | ObjectLock) -> Holder | None:
    """The holder a lock names where nobody holds it: a local lock file no process has locked (the
    kernel drops a dead holder's lock, the file stays; a holder that let go deleted it), taken
    shared and dropped at once to see; a lease whose heartbeat is older than LEASE_S. None where the
    lock is held, was let go, or cannot be known (a filesystem without locks)."""
    if isinstance(lock, ObjectLock):
        try:
            with lock.fs.open_input_stream(lock.path) as f:
                holder = Holder.from_json(f.read())
        except (OSError, pa.ArrowException):
            return None  # no lease (let go), or unreadable: not known
        now = dt.datetime.now(dt.timezone.utc)
        return holder if holder is not None and now - holder.heartbeat > dt.timedelta(seconds=LEASE_S) else None
    try:
        fd = os.open(lock.path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return Holder.from_json(os.pread(fd, 4096, 0))
    except OSError:
        return None  # held by its driver
    finally:
        os.close(fd)  # closing the descriptor drops the shared lock


def settle(path: str, run_id: str, manifest: dict, groups_done: int, by: str) -> dict:
    """For a run whose manifest says `running`: where its driver is gone, the manifest marked
    `interrupted` after `groups_done` groups (the rows on disk), `ended_by` naming the dead holder
    and `by` (what found it), written under the run's lock, taken without waiting; the manifest as it
    is now. Where it still runs, cannot be known, or cannot be written (a read-only dataset): as it
    was, with `driver_gone` (not a field) naming the holder where its driver is known to be gone."""
    from orchestrator.results import dataset
    from orchestrator.results.location import resolve
    from orchestrator.results.store import ResultStore

    fs, root = resolve(path)
    if fs.get_file_info(root).type == pafs.FileType.File:  # a row file <root>/<run>/<group>.parquet
        path = posixpath.dirname(posixpath.dirname(path.rstrip("/")))
    store = ResultStore(path, run_id)
    holder = left_behind(store.lock)
    if holder is None:
        return manifest
    now = dt.datetime.now(dt.timezone.utc)
    try:
        store.lock.acquire()
    except UsageError:  # a driver took it meanwhile (a resume), or the dataset is read-only
        still = left_behind(store.lock)
        return {**manifest, "driver_gone": still.describe()} if still else manifest
    try:
        current = dataset.manifest(path, run_id) or {}
        if current.get("state") != RunState.RUNNING.value:
            return current or manifest
        current.update(state=RunState.INTERRUPTED.value, groups_done=groups_done,
                       ended_by=f"its driver was killed without marking its manifest, {holder.describe()}; "
                       f"marked by {by} at {now.replace(microsecond=0).isoformat()}")
        store.write_manifest(current)
        return current
    except (OSError, pa.ArrowException, dataset.CorruptManifest):
        return {**manifest, "driver_gone": holder.describe()}
    finally:
        store.lock.release()
