"""Reading a results dataset back: a directory, a file, or an object-store URI."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads

from orchestrator.errors import UsageError, first_line
from orchestrator.results.schema import ROW_SCHEMA, SCHEMA_VERSION
from orchestrator.results.store import resolve

# Raw per-iteration samples are large and no report needs them.
COLUMNS = [f.name for f in ROW_SCHEMA if f.name != "iter_time_us"]


def load(path: str, run_id: str | None = None, latest: bool = True) -> pd.DataFrame:
    """Rows of one run (`run_id`, else the latest when `latest`, else all runs)."""
    fs, root = resolve(path)
    try:
        ds = pads.dataset(root, filesystem=fs, format="parquet", exclude_invalid_files=False)
        if not ds.files:
            raise UsageError(f"{path}: no result rows (no Parquet files)")
        versions = set(ds.to_table(columns=["schema_version"]).column(0).unique().to_pylist())
    except (pa.ArrowInvalid, pa.ArrowTypeError, FileNotFoundError, OSError, KeyError) as e:
        raise UsageError(f"{path}: not a collbench results dataset ({first_line(e)})") from None
    if not versions:
        raise UsageError(f"{path}: no result rows (no Parquet files)")
    if max(versions) > SCHEMA_VERSION:
        raise UsageError(f"{path}: schema_version {max(versions)} is newer than this collbench reads "
                         f"(up to {SCHEMA_VERSION}); upgrade collbench")
    missing = [c for c in ("run_id", "status", "collective", "msg_bytes") if c not in ds.schema.names]
    if missing:
        raise UsageError(f"{path}: not a collbench results dataset (no column {missing[0]})")
    # Older files lack the newer columns: read every file as the current schema (those are null).
    ds = pads.dataset(root, filesystem=fs, format="parquet", schema=ROW_SCHEMA)
    flt = None
    if run_id is None and latest:
        runs = ds.to_table(columns=["run_id", "started_at"]).to_pandas()
        run_id = runs.sort_values("started_at").run_id.iloc[-1]
    if run_id is not None:
        flt = pads.field("run_id") == run_id
    table = ds.to_table(columns=COLUMNS, filter=flt)
    if table.num_rows == 0:
        known = sorted(set(ds.to_table(columns=["run_id"]).column(0).to_pylist()))
        raise UsageError(f"--run {run_id}: no such run in {path} (runs: {', '.join(known[-5:])})")
    return table.to_pandas()


def runs(path: str) -> list[str]:
    """Run ids in the dataset, oldest first."""
    df = load(path, latest=False)[["run_id", "started_at"]].drop_duplicates()
    return list(df.sort_values("started_at").run_id)
