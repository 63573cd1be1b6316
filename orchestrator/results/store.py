"""ResultStore: one Parquet file per finished group, and one manifest per run.

Layout under the output root:
    <root>/<run_id>/<group_id>.parquet     rows of one group (ROW_SCHEMA)
    <root>/_runs/<run_id>.parquet          the run's manifest (MANIFEST_SCHEMA), one row
Readers skip names starting with `_` or `.`, so `pandas.read_parquet(root)` returns all rows of
all runs, and `pandas.read_parquet(root + "/_runs")` the manifests, joinable by run_id.
Directories are not named `run_id=...`: the rows carry run_id themselves, and pandas' hive
discovery would add a second, dictionary-typed run_id column that clashes with it.
Local files are written under a hidden temporary name and renamed, so a crash never leaves a
torn file; object stores make each put atomic by themselves.
"""

from __future__ import annotations

import os
import urllib.parse
import uuid

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from orchestrator.errors import UsageError, first_line
from orchestrator.results.schema import MANIFEST_SCHEMA, SCHEMA_VERSION, rows_table

MANIFEST_DIR = "_runs"


def is_uri(output: str) -> bool:
    return "://" in output


def resolve(output: str) -> tuple[pafs.FileSystem, str]:
    """(filesystem, root path) for a directory or an object-store URI."""
    if output.startswith("s3://"):
        return _s3(output)
    if is_uri(output):
        try:
            return pafs.FileSystem.from_uri(output)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as e:
            raise UsageError(f"--output {output}: {first_line(e)}") from None
    return pafs.LocalFileSystem(), os.path.abspath(output)


_S3_OPTIONS = {"region": str, "endpoint_override": str, "scheme": str}


def _s3(uri: str) -> tuple[pafs.FileSystem, str]:
    """s3://bucket/prefix[?region=..&endpoint_override=..&scheme=..]. Small objects are written
    with one PUT (allow_delayed_open), which also suits S3-compatible servers."""
    parts = urllib.parse.urlsplit(uri)
    query = dict(urllib.parse.parse_qsl(parts.query))
    unknown = sorted(set(query) - set(_S3_OPTIONS))
    if unknown:
        raise UsageError(f"--output {uri}: unknown option {unknown[0]} (known: {', '.join(_S3_OPTIONS)})")
    if not parts.netloc:
        raise UsageError(f"--output {uri}: no bucket")
    fs = pafs.S3FileSystem(allow_delayed_open=True, **query)
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
    if not os.path.isdir(probe) or not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"--output {output}: {probe} is not writable")


def _probe_object_store(output: str) -> None:
    """The bucket exists and an object can be written and deleted with these credentials."""
    fs, root = resolve(output)
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
        self._local = isinstance(self.fs, pafs.LocalFileSystem)

    @property
    def location(self) -> str:
        return self.output if is_uri(self.output) else self.root

    def create(self) -> None:
        self.fs.create_dir(self.run_dir, recursive=True)
        self.fs.create_dir(f"{self.root}/{MANIFEST_DIR}", recursive=True)

    def write_group(self, group_id: str, rows: list[dict]) -> None:
        self._write(rows_table(rows), f"{self.run_dir}/{group_id}.parquet")

    def write_manifest(self, manifest: dict) -> None:
        table = pa.Table.from_pylist(
            [{"schema_version": SCHEMA_VERSION, "run_id": self.run_id, **manifest}], schema=MANIFEST_SCHEMA
        )
        self._write(table, f"{self.root}/{MANIFEST_DIR}/{self.run_id}.parquet")

    def finished_groups(self) -> set[str]:
        """Group ids with a complete file in this run (for --resume)."""
        selector = pafs.FileSelector(self.run_dir, allow_not_found=True)
        names = (info.base_name for info in self.fs.get_file_info(selector))
        return {n[: -len(".parquet")] for n in names if n.endswith(".parquet") and not n.startswith((".", "_"))}

    def _write(self, table: pa.Table, path: str) -> None:
        if not self._local:
            pq.write_table(table, path, filesystem=self.fs)
            return
        directory, name = os.path.split(path)
        tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, path)
