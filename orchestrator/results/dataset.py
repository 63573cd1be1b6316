"""Reading a results dataset back: a directory, a file, or an object-store URI.

Only `*.parquet` files count, and none under a name starting with `_` or `.` (manifests, plots
in `_plots`, temporary files), so PNG or CSV files beside the rows are ignored. In a run folder a
group file replaces that group's rows in compacted part files (a compaction under way on an
object store, or groups measured again by --resume after one). Files of an older schema_version are read with
the columns they lack as nulls; a newer one is refused with its version named. A Parquet file
that is not collbench's (no schema_version) is ignored.
"""

from __future__ import annotations

import datetime as dt
import json
import posixpath

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from orchestrator.errors import UsageError, first_line
from orchestrator.results.schema import MANIFEST_SCHEMA, ROW_SCHEMA, SCHEMA_VERSION
from orchestrator.results.store import MANIFEST_DIR, PART_PREFIX, resolve

# Raw per-iteration samples are large and only compare needs them.
COLUMNS = [f.name for f in ROW_SCHEMA if f.name != "iter_time_us"]


def row_files(fs: pafs.FileSystem, root: str) -> dict[str, list[str]]:
    """The Parquet files of rows under `root` (or `root` itself when it is a file), by folder."""
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.File:
        return {posixpath.dirname(root): [root]}
    if info.type == pafs.FileType.NotFound:
        return {}
    by_dir: dict[str, list[str]] = {}
    for f in fs.get_file_info(pafs.FileSelector(root, recursive=True)):
        rel = posixpath.relpath(f.path, root)
        if f.type != pafs.FileType.File or not f.base_name.endswith(".parquet"):
            continue
        if any(part.startswith(("_", ".")) for part in rel.split("/")):
            continue
        by_dir.setdefault(posixpath.dirname(f.path), []).append(f.path)
    return {d: sorted(paths) for d, paths in by_dir.items()}


class _Rows:
    """The dataset as scans: group files, and part files less the groups those replace."""

    def __init__(self, path: str) -> None:
        fs, root = resolve(path)
        try:
            by_dir = row_files(fs, root)
        except (OSError, pa.ArrowException) as e:
            raise UsageError(f"{path}: cannot list it ({first_line(e)})") from None
        if not by_dir:
            raise UsageError(f"{path}: no result rows (no Parquet files)")
        groups, self.scans = [], []
        for paths in by_dir.values():
            parts = [p for p in paths if posixpath.basename(p).startswith(PART_PREFIX)]
            singles = [p for p in paths if p not in parts]
            groups += singles
            if parts:
                replaced = [posixpath.basename(p)[: -len(".parquet")] for p in singles]
                flt = ~pads.field("group_id").isin(replaced) if replaced else None
                self.scans.append((pads.dataset(parts, filesystem=fs, format="parquet", schema=ROW_SCHEMA), flt))
        if groups:
            self.scans.append((pads.dataset(groups, filesystem=fs, format="parquet", schema=ROW_SCHEMA), None))

    def table(self, columns: list[str], flt: pads.Expression) -> pa.Table:
        return pa.concat_tables([ds.to_table(columns=columns, filter=flt if own is None else flt & own)
                                 for ds, own in self.scans])


def load(path: str, run_id: str | None = None, latest: bool = True, columns: list[str] | None = None) -> pd.DataFrame:
    """Rows of one run (`run_id`, else the latest when `latest`, else all runs)."""
    return load_table(path, run_id, latest, columns).to_pandas()


def load_table(path: str, run_id: str | None = None, latest: bool = True,
               columns: list[str] | None = None) -> pa.Table:
    """`load` as an Arrow table (columnar work, no pandas objects for list columns)."""
    rows = _Rows(path)
    ours = pads.field("schema_version").is_valid()
    try:
        index = rows.table(["schema_version", "run_id", "started_at"], ours)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as e:
        raise UsageError(f"{path}: not a collbench results dataset ({first_line(e)})") from None
    if index.num_rows == 0:
        raise UsageError(f"{path}: no collbench result rows (no Parquet file with a schema_version)")
    newest = pc.max(index.column("schema_version")).as_py()
    if newest > SCHEMA_VERSION:
        raise UsageError(f"{path}: schema_version {newest} is newer than this collbench reads "
                         f"(up to {SCHEMA_VERSION}); upgrade collbench")
    if run_id is None and latest:
        runs = index.select(["run_id", "started_at"]).to_pandas()
        run_id = runs.sort_values("started_at").run_id.iloc[-1]
    flt = ours if run_id is None else ours & (pads.field("run_id") == run_id)
    table = rows.table(columns or COLUMNS, flt)
    if table.num_rows == 0:
        known = sorted(set(index.column("run_id").to_pylist()))
        raise UsageError(f"--run {run_id}: no such run in {path} (runs: {', '.join(known[-5:])})")
    return table


def runs(path: str) -> list[str]:
    """Run ids in the dataset, oldest first."""
    df = load(path, latest=False, columns=["run_id", "started_at"]).drop_duplicates()
    return list(df.sort_values("started_at").run_id)


def manifest(path: str, run_id: str) -> dict | None:
    """The run's manifest as a dict (MANIFEST_SCHEMA's fields), or None when it has none.
    Reads the JSON of today and the one-row Parquet of schema_version 1."""
    fs, root = resolve(path)
    if fs.get_file_info(root).type == pafs.FileType.File:
        root = posixpath.dirname(posixpath.dirname(root))  # a row file <root>/<run>/<group>.parquet
    base = f"{root}/{MANIFEST_DIR}/{run_id}"
    try:
        with fs.open_input_stream(base + ".json") as f:
            record = json.loads(f.read())
        for field in MANIFEST_SCHEMA:
            if pa.types.is_timestamp(field.type) and isinstance(record.get(field.name), str):
                record[field.name] = dt.datetime.fromisoformat(record[field.name])
        return pa.Table.from_pylist([record], schema=MANIFEST_SCHEMA).to_pylist()[0]
    except (FileNotFoundError, OSError, pa.ArrowException, ValueError):
        pass
    try:
        table = pq.read_table(base + ".parquet", filesystem=fs)
    except (FileNotFoundError, OSError, pa.ArrowException):
        return None
    return {name: table.column(name)[0].as_py() for name in table.column_names}
