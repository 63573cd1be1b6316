"""ResultStore: one Parquet file per finished group while a run goes, a few once it is done,
and one manifest per run.

Layout under the output root:
    <root>/<run_id>/<group_id>.parquet     rows of one group (ROW_SCHEMA), written as it ends
    <root>/<run_id>/part-00000.parquet     the run's rows once it finished (compacted)
    <root>/_runs/<run_id>.json             the run's manifest (MANIFEST_SCHEMA's fields)
Every .parquet file below the root holds rows, so `pandas.read_parquet(root)`,
`pyarrow.dataset.dataset(root)`, DuckDB's `'root/**/*.parquet'` and Polars'
`scan_parquet('root/**/*.parquet')` all read the rows of every run, each row once; readers skip
names starting with `_` or `.` (manifests, plots written to `_plots`, temporary files).
Directories are not named `run_id=...`: the rows carry run_id themselves, and pandas' hive
discovery would add a second, dictionary-typed run_id column that clashes with it.
Local files are written under a hidden temporary name and renamed, so a crash never leaves a
torn file; object stores make each put atomic by themselves. One process writes a run at a time:
it holds the run's lock, <root>/_runs/<run_id>.lock (lock.py). Compaction (compact.py) swaps a
finished run's folder for its compacted twin in one atomic rename (Linux renameat2), so a reader
sees either all group files or the part files, never both; on object stores the part files are
written first and the group files deleted after, and collbench's own reader lets a group file
replace its group's rows in part files.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
import threading
import urllib.parse
import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from orchestrator.errors import UsageError, first_line
from orchestrator.results.lock import run_lock
from orchestrator.results.schema import MANIFEST_SCHEMA, SCHEMA_VERSION, rows_table
from orchestrator.timeouts import connect_timeout_s

MANIFEST_DIR = "_runs"
PART_PREFIX = "part-"
PART_ROWS = 1_000_000  # rows per compacted file


def is_uri(output: str) -> bool:
    return "://" in output


def resolve(output: str) -> tuple[pafs.FileSystem, str]:
    """(filesystem, root path) for a directory or an object-store URI."""
    if output.startswith("s3://"):
        return _s3(output)
    if output.startswith("gs://"):
        return _gcs(output)
    if is_uri(output):
        try:
            return pafs.FileSystem.from_uri(output)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as e:
            raise UsageError(f"--output {output}: {first_line(e)}") from None
    return pafs.LocalFileSystem(), os.path.abspath(output)


_S3_OPTIONS = {"region": str, "endpoint_override": str, "scheme": str}
_GCS_OPTIONS = {"endpoint_override": str, "scheme": str, "project_id": str, "anonymous": bool}
# How long a GCS call retries transient errors (pyarrow's default is 15 minutes: an output with no
# network hung the command that long; now a call fails within this).
GCS_RETRY_S = 15


def _options(uri: str, known: dict[str, type]) -> tuple[urllib.parse.SplitResult, dict]:
    """The URI's parts and its ?key=value options, checked against `known`."""
    parts = urllib.parse.urlsplit(uri)
    query = dict(urllib.parse.parse_qsl(parts.query))
    unknown = sorted(set(query) - set(known))
    if unknown:
        raise UsageError(f"--output {uri}: unknown option {unknown[0]} (known: {', '.join(known)})")
    if not parts.netloc:
        raise UsageError(f"--output {uri}: no bucket")
    for key, kind in known.items():
        if kind is bool and key in query:
            if query[key].lower() not in ("true", "false", "1", "0"):
                raise UsageError(f"--output {uri}: {key}={query[key]!r}: expected true or false")
            query[key] = query[key].lower() in ("true", "1")
    return parts, query


def _s3(uri: str) -> tuple[pafs.FileSystem, str]:
    """s3://bucket/prefix[?region=..&endpoint_override=..&scheme=..]. Small objects are written
    with one PUT (allow_delayed_open), which also suits S3-compatible servers."""
    parts, query = _options(uri, _S3_OPTIONS)
    fs = pafs.S3FileSystem(allow_delayed_open=True, **query)
    return fs, f"{parts.netloc}{parts.path}".rstrip("/")


def _gcs(uri: str) -> tuple[pafs.FileSystem, str]:
    """gs://bucket/prefix[?project_id=..&endpoint_override=..&scheme=..&anonymous=..], retrying
    transient errors for GCS_RETRY_S, not pyarrow's 15 minutes."""
    parts, query = _options(uri, _GCS_OPTIONS)
    fs = pafs.GcsFileSystem(retry_time_limit=dt.timedelta(seconds=GCS_RETRY_S), **query)
    return fs, f"{parts.netloc}{parts.path}".rstrip("/")


def resolve_output(output: str) -> str:
    """An absolute location for --output. A relative path under `ray job submit` resolves against
    the home directory: the job's working directory is a temporary copy that Ray deletes."""
    if is_uri(output) or os.path.isabs(output):
        return output
    if "RAY_JOB_CONFIG_JSON_ENV_VAR" in os.environ:
        return os.path.join(os.path.expanduser("~"), output)
    return os.path.abspath(output)


def check_writable(output: str) -> None:
    """Refuse an output that cannot be written, before anything runs and without leaving files."""
    if is_uri(output):
        _probe_object_store(output)
        return
    path = os.path.abspath(output)
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"--output {output}: exists and is not a directory")
    probe = path
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise UsageError(f"--output {output}: {probe} is not writable")
    try:  # the only sure test (root passes os.access, yet /proc refuses files): make one and delete it
        fd, name = tempfile.mkstemp(prefix=".collbench-probe-", dir=probe)
    except OSError as e:
        raise UsageError(f"--output {output}: {probe} is not writable ({e.strerror})") from None
    os.close(fd)
    os.unlink(name)


def _probe_object_store(output: str) -> None:
    """The bucket exists and an object can be written and deleted with these credentials, found
    out within the connect timeout (a store that does not answer, or a credential lookup that
    waits on an unreachable metadata server, is given up on)."""
    fs, root = resolve(output)
    timeout_s = connect_timeout_s()
    failure: list[BaseException] = []

    def attempt() -> None:
        try:
            _write_probe(fs, root, output)
        except BaseException as e:  # handed to the caller's thread
            failure.append(e)

    # A daemon thread: one stuck in the store's client must not keep the process from exiting.
    thread = threading.Thread(target=attempt, name="collbench-probe", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise UsageError(f"--output {output}: no answer from the object store in {timeout_s:g} s")
    if failure:
        raise failure[0]


def _write_probe(fs: pafs.FileSystem, root: str, output: str) -> None:
    bucket = root.split("/", 1)[0]
    probe = f"{root.rstrip('/')}/_collbench_probe_{uuid.uuid4().hex}"
    try:
        if fs.get_file_info(bucket).type == pafs.FileType.NotFound:
            raise UsageError(f"--output {output}: bucket {bucket} does not exist")
        with fs.open_output_stream(probe) as f:
            f.write(b"probe")
        fs.delete_file(probe)
    except (OSError, pa.ArrowException) as e:
        raise UsageError(f"--output {output}: cannot write there ({first_line(e)})") from None


class ResultStore:
    def __init__(self, output: str, run_id: str) -> None:
        self.output = output
        self.run_id = run_id
        self.fs, self.root = resolve(output)
        self.run_dir = f"{self.root}/{run_id}"
        self.local = isinstance(self.fs, pafs.LocalFileSystem)
        self.lock = run_lock(self.fs, self.root, MANIFEST_DIR, run_id, self.location)

    @property
    def location(self) -> str:
        return self.output if is_uri(self.output) else self.root

    def create(self) -> None:
        self.fs.create_dir(self.run_dir, recursive=True)
        self.fs.create_dir(f"{self.root}/{MANIFEST_DIR}", recursive=True)

    def write_group(self, group_id: str, rows: list[dict]) -> None:
        self.write_table(rows_table(rows), f"{self.run_dir}/{group_id}.parquet")

    def write_manifest(self, manifest: dict) -> None:
        """The manifest as one JSON object (its types are MANIFEST_SCHEMA's; times in ISO 8601)."""
        record = {"schema_version": SCHEMA_VERSION, "run_id": self.run_id, **manifest}
        unknown = sorted(set(record) - set(MANIFEST_SCHEMA.names))
        if unknown:
            raise KeyError(f"not a manifest field: {', '.join(unknown)}")
        text = json.dumps(record, default=_iso, indent=1).encode()
        self._put(text, f"{self.root}/{MANIFEST_DIR}/{self.run_id}.json")

    def finished_groups(self, ok_only: bool = False) -> set[str]:
        """Group ids of this run already on disk (for --resume), in group files and compacted
        rows; with `ok_only`, only the groups whose every row is ok (--retry-failed)."""
        from orchestrator.results.dataset import load_table

        infos = self.fs.get_file_info(pafs.FileSelector(self.run_dir, allow_not_found=True))
        if not any(row_file(i.base_name) for i in infos):
            return set()
        table = load_table(self.location_of_run(), columns=["group_id", "status"])
        groups = set(table.column("group_id").to_pylist())
        if ok_only:
            bad = pc.filter(table.column("group_id"), pc.not_equal(table.column("status"), "ok"))
            groups -= set(bad.to_pylist())
        return groups

    def acquire(self, wait_s: float = 0.0) -> None:
        """Become the run's one writer (lock.py): refused in one line naming the holder when another
        process still holds it after wait_s; then clear what a killed compaction of the run left."""
        from orchestrator.results.compact import clear_leftovers

        self.lock.acquire(wait_s)
        try:
            clear_leftovers(self)
        except BaseException:
            self.lock.release()
            raise

    def release(self) -> None:
        self.lock.release()

    def compact(self, wait_s: float | None = None) -> int:
        """Rewrite the run's rows as a few part files, under the run's lock (compact.py); returns
        the number of group files merged."""
        from orchestrator.results.compact import COMPACT_WAIT_S, compact

        return compact(self, COMPACT_WAIT_S if wait_s is None else wait_s)

    def location_of_run(self) -> str:
        """The run's folder as a path or URI, for the dataset reader."""
        if not is_uri(self.output):
            return self.run_dir
        parts = urllib.parse.urlsplit(self.output)
        return urllib.parse.urlunsplit(parts._replace(path=f"{parts.path.rstrip('/')}/{self.run_id}"))

    def write_table(self, table: pa.Table, path: str) -> None:
        if not self.local:
            pq.write_table(table, path, filesystem=self.fs)
            return
        directory, name = os.path.split(path)
        tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, path)

    def _put(self, data: bytes, path: str) -> None:
        if not self.local:
            with self.fs.open_output_stream(path) as f:
                f.write(data)
            return
        directory, name = os.path.split(path)
        tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)


def row_file(name: str) -> bool:
    return name.endswith(".parquet") and not name.startswith((".", "_"))


def _iso(value: object) -> str:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
