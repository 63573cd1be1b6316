"""One run's folder under an output root: its filesystem, root and folder, the run's lock, how a
file is written whole, and whether this process may still write. The store (store.py: group files
and manifests) and the compaction (compact.py: a finished run's files rewritten) both write
through it, so neither reaches into the other.

Local files are written under a hidden temporary name and renamed, so a crash never leaves a
torn file; object stores make each put atomic by themselves.
"""

from __future__ import annotations

import contextlib
import os
import urllib.parse
import uuid

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from orchestrator.errors import RunStopped
from orchestrator.results.location import MANIFEST_DIR, is_uri, resolve
from orchestrator.results.lock import run_lock


class RunFolder:
    def __init__(self, output: str, run_id: str, partition: str | None = None) -> None:
        """`partition`: a folder under the root that holds the run's folder (`watch` writes each
        cycle under date=YYYY-MM-DD); the manifest and the lock stay in the root's _runs."""
        self.output = output
        self.run_id = run_id
        self.partition = partition
        self.fs, self.root = resolve(output)
        self.run_dir = f"{self.root}/{partition}/{run_id}" if partition else f"{self.root}/{run_id}"
        self.local = isinstance(self.fs, pafs.LocalFileSystem)
        self.lock = run_lock(self.fs, self.root, MANIFEST_DIR, run_id, self.location)

    @property
    def location(self) -> str:
        return self.output if is_uri(self.output) else self.root

    def location_of_run(self) -> str:
        """The run's folder as a path or URI, for the dataset reader."""
        if not is_uri(self.output):
            return self.run_dir
        parts = urllib.parse.urlsplit(self.output)
        below = f"{self.partition}/{self.run_id}" if self.partition else self.run_id
        return urllib.parse.urlunsplit(parts._replace(path=f"{parts.path.rstrip('/')}/{below}"))

    def still_the_writer(self) -> None:
        """Stop before a write once another process took the run's lease over (an object store's
        lock whose heartbeats did not get through): two writers never write one run."""
        taker = getattr(self.lock, "lost", None)
        if taker is None:
            return
        why = (f"its lock was taken over by {taker.describe()} (this process's lease ran out while the object "
               "store did not answer)") if getattr(taker, "token", None) else \
            "its lock object was deleted while it held it (another process may take the run)"
        raise RunStopped(f"run {self.run_id} in {self.location}: {why}; stopped without writing more, so that one "
                         "process writes the run")

    def write_table(self, table: pa.Table, path: str) -> None:
        if not self.local:
            pq.write_table(table, path, filesystem=self.fs)
            return
        directory, name = os.path.split(path)
        tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
        with _removed_on_failure(tmp):
            pq.write_table(table, tmp)
            os.replace(tmp, path)

    def put(self, data: bytes, path: str) -> None:
        if not self.local:
            with self.fs.open_output_stream(path) as f:
                f.write(data)
            return
        directory, name = os.path.split(path)
        tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
        with _removed_on_failure(tmp):
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)


@contextlib.contextmanager
def _removed_on_failure(tmp: str):
    """An atomic write's temporary goes when the write fails (a full disk, an interrupt): it holds
    room the next write may need, and a half-written file is litter either way."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
