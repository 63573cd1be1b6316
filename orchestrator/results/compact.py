"""Compaction: a finished run's group files rewritten as a few part files, safe against a second
compaction of the same run and against a crash at any point.

Safety against a second compaction: the compaction holds the run's lock (lock.py; it waits for a
holder up to a limit), reads the folder only once it holds it, and stages under a name of its
own. Safety against a crash, on a local disk (Linux renameat2): the parts are written and synced
in a hidden staging folder beside the run folder, and one atomic exchange swaps it with the run
folder; readers see the group files or the parts, never both, never neither. A crash before the
exchange leaves the run folder whole and a staging folder of half-written parts; a crash after it
leaves the parts in place and the replaced group files in the staging folder. Either leftover is
hidden (`.` name) from collbench, pyarrow and pandas, and is deleted by the next holder of the
run's lock (`clear_leftovers`) before anything else. Without renameat2, and on object stores, no
step is atomic but a file's put: the parts are written first and the group files deleted after
(`_write_then_delete`); collbench's reader lets a group file replace its group's rows in the parts,
so it reads each row once at every point; other readers may count a group twice until the
deletes are done (or the next compaction redoes them).
"""

from __future__ import annotations

import ctypes
import errno
import os
import posixpath
import re
import shutil
import uuid
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from orchestrator.results import location
from orchestrator.results.dataset import load_table
from orchestrator.results.location import PART_PREFIX, row_file
from orchestrator.results.run_folder import RunFolder
from orchestrator.results.schema import ROW_SCHEMA

STAGING_SUFFIX = ".compacting"
# How long a compaction waits for the run's lock held by another process (a compaction takes
# seconds; a run holding it for longer is refused, naming it).
COMPACT_WAIT_S = 120.0


def _no_crash(step: str) -> None:
    """Called after each step that changes the disk; tests replace it to kill the process there."""


after_step: Callable[[str], None] = _no_crash


def compact(folder: RunFolder, wait_s: float = COMPACT_WAIT_S) -> int:
    """Rewrite the run's rows as part files of up to PART_ROWS rows (a group file replaces its
    group's rows in older part files); returns the number of group files merged."""
    held = folder.lock.held  # a run compacting as it ends holds its lock already
    if not held:
        folder.lock.acquire(wait_s)
    try:
        after_step("locked")
        clear_leftovers(folder)
        return _compact(folder)
    finally:
        if not held:
            folder.lock.release()


def staging_name(run_id: str) -> str:
    return f".{run_id}{STAGING_SUFFIX}-{os.getpid()}-{uuid.uuid4().hex}"


def clear_leftovers(folder: RunFolder) -> list[str]:
    """Delete the staging folders of killed compactions of this run (only the lock's holder may:
    while it holds the lock no other compaction of the run is under way). Returns their names."""
    if not folder.local:
        return []
    own = re.compile(re.escape(f".{folder.run_id}{STAGING_SUFFIX}") + r"(-\d+-[0-9a-f]{32})?")
    try:
        names = [n for n in os.listdir(folder.root) if own.fullmatch(n)]
    except FileNotFoundError:
        return []
    for name in names:
        shutil.rmtree(os.path.join(folder.root, name), ignore_errors=True)
    return names


def _compact(folder: RunFolder) -> int:
    infos = folder.fs.get_file_info(pafs.FileSelector(folder.run_dir, allow_not_found=True))
    rows = [i for i in infos if row_file(i.base_name)]
    groups = sorted(i.path for i in rows if not i.base_name.startswith(PART_PREFIX))
    old_parts = sorted(i.path for i in rows if i.base_name.startswith(PART_PREFIX))
    if not groups or (len(groups) < 2 and not old_parts):
        return 0
    if folder.local and _exchange is not None:
        try:
            _swap(folder)
            return len(groups)
        except OSError as e:
            if e.errno not in _NO_EXCHANGE:
                raise
            # a filesystem without RENAME_EXCHANGE (NFS, FUSE, overlay mounts): nothing was
            # swapped and the staging copy is gone; part files first, then the group files
    _write_then_delete(folder, groups, old_parts)
    return len(groups)


# renameat2 errors of a filesystem that cannot exchange (what NFS, FUSE and old overlayfs answer)
_NO_EXCHANGE = (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EXDEV)


def _sliced(table: pa.Table, first: int = 0) -> dict[str, pa.Table]:
    """Part file names (numbered from `first`) and their rows, up to PART_ROWS each."""
    return {f"{PART_PREFIX}{first + k:05d}.parquet": table.slice(lo, location.PART_ROWS)
            for k, lo in enumerate(range(0, table.num_rows, location.PART_ROWS))}


def _write_then_delete(folder: RunFolder, groups: list[str], old_parts: list[str]) -> None:
    """Without an atomic swap: each step leaves a folder that collbench's reader reads whole, a
    group file replacing its group's rows in every part file. (1) Each older part that holds rows
    of a group with a group file is rewritten without them; (2) the group files' rows are written
    as new parts, numbered after the older ones; (3) the group files are deleted. Rewriting the
    parts wholesale instead would move rows between files, and a crash halfway through would read
    some twice and lose others."""
    replaced = pa.array([posixpath.basename(g)[: -len(".parquet")] for g in groups])
    for path in old_parts:
        part = _read(folder, [path])
        kept = part.filter(pc.invert(pc.is_in(part.column("group_id"), value_set=replaced)))
        if kept.num_rows == part.num_rows:
            continue
        if kept.num_rows:
            folder.write_table(kept, path)  # one atomic put (or rename) per file
        else:
            folder.fs.delete_file(path)
        after_step("part-rewritten")
    numbers = [int(m.group(1)) for p in old_parts if (m := re.fullmatch(rf"{PART_PREFIX}(\d+)\.parquet",
                                                                          posixpath.basename(p)))]
    for name, part in _sliced(_read(folder, groups), max(numbers, default=-1) + 1).items():
        folder.write_table(part, f"{folder.run_dir}/{name}")
        after_step("part-written")
    for path in groups:
        folder.fs.delete_file(path)
        after_step("old-file-deleted")


def _read(folder: RunFolder, paths: list[str]) -> pa.Table:
    """Rows of these files, older schema versions with the columns they lack as nulls."""
    return pads.dataset(paths, filesystem=folder.fs, format="parquet", schema=ROW_SCHEMA).to_table()


def _swap(folder: RunFolder) -> None:
    """The run's rows (as collbench reads them) staged as parts, then swapped in atomically."""
    parts = _sliced(load_table(folder.location_of_run(), columns=ROW_SCHEMA.names))
    staging = os.path.join(folder.root, staging_name(folder.run_id))
    os.makedirs(staging)
    after_step("staging-made")
    try:  # glob readers (duckdb's **/*.parquet) look into hidden folders too: never leave it
        for name, part in parts.items():
            path = os.path.join(staging, name)
            pq.write_table(part, path)
            _fsync(path)  # on disk before the exchange makes it the run's only copy
            after_step("part-written")
        _fsync(staging)
        _exchange(staging, folder.run_dir)  # readers see the group files or the parts, never both
        _fsync(folder.root)
        if os.path.dirname(folder.run_dir) != folder.root:  # a partitioned run (watch): its folder's parent too
            _fsync(os.path.dirname(folder.run_dir))
        after_step("exchanged")
        for entry in sorted(os.scandir(staging), key=lambda e: e.name):  # the replaced files
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
            after_step("old-file-deleted")
        os.rmdir(staging)
        after_step("staging-removed")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _renameat2_exchange():
    """os has no atomic exchange of two paths; Linux's renameat2(RENAME_EXCHANGE) is one."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    at_fdcwd, rename_exchange = -100, 2

    def exchange(a: str, b: str) -> None:
        if fn(at_fdcwd, a.encode(), at_fdcwd, b.encode(), rename_exchange) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"renameat2 exchange {a} <-> {b}: {os.strerror(err)}")

    return exchange


_exchange = _renameat2_exchange()
