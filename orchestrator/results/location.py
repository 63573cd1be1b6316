"""Where results live: the output root as a local folder or an object-store URI (S3, GCS, any
pyarrow filesystem), the names inside it, and the checks made before anything is written. Both
the writer (store.py) and the readers (dataset.py) build on this; neither imports the other's
location logic.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
import threading
import urllib.parse
import uuid

import pyarrow as pa
import pyarrow.fs as pafs

from orchestrator.errors import UsageError, first_line
from orchestrator.timeouts import connect_timeout_s

MANIFEST_DIR = "_runs"
PART_PREFIX = "part-"
PART_ROWS = 1_000_000  # rows per compacted file


def new_run_id(now: dt.datetime) -> str:
    """A run's id: its start (UTC, to the second) and 6 random hex digits."""
    return f"{now:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


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


def check_writable(output: str, option: str = "--output") -> None:
    """Refuse an output that cannot be written, before anything runs and without leaving files."""
    if is_uri(output):
        _probe_object_store(output)
        return
    path = os.path.abspath(output)
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"{option} {output}: exists and is not a directory")
    probe = path
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise UsageError(f"{option} {output}: {probe} is not writable")
    try:  # the only sure test (root passes os.access, yet /proc refuses files): make one and delete it
        fd, name = tempfile.mkstemp(prefix=".collbench-probe-", dir=probe)
    except OSError as e:
        raise UsageError(f"{option} {output}: {probe} is not writable ({e.strerror})") from None
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


def row_file(name: str) -> bool:
    return name.endswith(".parquet") and not name.startswith((".", "_"))
