"""A run whose driver is gone without letting go of its lock (results/lock.py): killed outright
(SIGKILL, the OOM killer, srun ending a cancelled Slurm job's step within milliseconds), so its
manifest still says `running`. Readers say so instead of "still running, or its driver died"."""

from __future__ import annotations

import datetime as dt
import fcntl
import os
import posixpath

import pyarrow as pa
import pyarrow.fs as pafs

from orchestrator.results.lock import LEASE_S, Holder, LocalLock, ObjectLock, run_lock


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


def driver_gone(path: str, run_id: str) -> str | None:
    """For a run whose manifest says `running`: who held it, where its driver is gone ("host H pid
    P since T"); None where it still runs or cannot be known."""
    from orchestrator.results.location import MANIFEST_DIR, resolve

    fs, root = resolve(path)
    if fs.get_file_info(root).type == pafs.FileType.File:
        root = posixpath.dirname(posixpath.dirname(root))  # a row file <root>/<run>/<group>.parquet
    holder = left_behind(run_lock(fs, root, MANIFEST_DIR, run_id, path))
    return holder.describe() if holder else None
