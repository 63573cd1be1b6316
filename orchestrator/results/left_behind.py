"""A run whose driver is gone without letting go of its lock (results/lock.py): killed outright
(SIGKILL, the OOM killer, srun ending a cancelled Slurm job's step within milliseconds), so its
manifest still says `running`. A reader that finds one whose driver is provably dead (`collbench
report` on the host that ran it, as a Slurm batch script runs it when scancel ends its job) marks the
manifest `interrupted` itself, under the run's lock, with who held it (`ended_by`): from then on the
manifest says how the run ended, and `--resume` finishes it. Other readers say the driver is gone."""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import posixpath
import socket

import pyarrow as pa
import pyarrow.fs as pafs

from orchestrator.results.lock import LEASE_S, Holder, LocalLock, ObjectLock, run_lock
from orchestrator.results.schema import SCHEMA_VERSION, RunState


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
    """For a run whose manifest says `running`: where its driver is provably dead (its lock, on a local
    disk, free, naming a process of this host that no longer runs: the batch script's report on the
    node that ran it), the manifest file patched to `interrupted` after `groups_done` groups (the rows
    on disk), with `ended_by` naming the dead holder and `by` (what found it), under the run's lock
    taken without waiting and without rewriting it; the manifest as it is now. Elsewhere (another
    host: its flock may not reach across hosts; an object store's lease: clocks; a manifest of another
    schema; one that cannot be written): as it was, with `driver_gone` (not a field) naming the
    holder where its lock is free."""
    from orchestrator.results.location import MANIFEST_DIR, resolve
    from orchestrator.results.run_folder import RunFolder

    fs, root = resolve(path)
    if fs.get_file_info(root).type == pafs.FileType.File:
        root = posixpath.dirname(posixpath.dirname(root))  # a row file <root>/<run>/<group>.parquet
    lock = run_lock(fs, root, MANIFEST_DIR, run_id, path)
    holder = left_behind(lock)
    if holder is None:
        return manifest
    said = {**manifest, "driver_gone": holder.describe()}
    if not isinstance(lock, LocalLock) or holder.host != socket.gethostname() or not holder.gone():
        return said
    try:
        fd = os.open(lock.path, os.O_RDWR)
    except OSError:
        return manifest  # let go meanwhile
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released as the descriptor closes; the file kept
        if not lock._still_there(fd):
            raise BlockingIOError  # let go, and perhaps taken again, meanwhile
    except OSError:
        os.close(fd)
        return manifest  # a resume holds it
    try:
        now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
        marked = _patch(RunFolder(root, run_id), f"{root}/{MANIFEST_DIR}/{run_id}.json", {
            "state": RunState.INTERRUPTED.value, "groups_done": groups_done,
            "ended_by": f"its driver was killed without marking its manifest, {holder.describe()}; marked by "
                        f"{by} at {now.isoformat()}"})
        return {**manifest, **marked} if marked else said
    except (OSError, ValueError, TypeError):  # unreadable or unwritable: said, not marked
        return said
    finally:
        os.close(fd)


def _patch(folder, path: str, fields: dict) -> dict | None:
    """Set `fields` in the JSON manifest at `path` (every other key kept as written), written whole
    by `folder` (a RunFolder: a temporary name, renamed); None where it is not a `running` manifest of
    this schema."""
    with open(path, "rb") as f:
        record = json.loads(f.read())
    if not isinstance(record, dict) or record.get("state") != RunState.RUNNING.value \
            or int(record.get("schema_version") or 0) > SCHEMA_VERSION:
        return None
    folder.put(json.dumps({**record, **fields}, indent=1).encode(), path)
    return fields
