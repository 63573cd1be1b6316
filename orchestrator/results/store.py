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
torn file; object stores make each put atomic by themselves (run_folder.py). One process writes a run at a time:
it holds the run's lock, <root>/_runs/<run_id>.lock (lock.py). Compaction (compact.py) swaps a
finished run's folder for its compacted twin in one atomic rename (Linux renameat2), so a reader
sees either all group files or the part files, never both; on object stores the part files are
written first and the group files deleted after, and collbench's own reader lets a group file
replace its group's rows in part files.
"""

from __future__ import annotations

import contextlib
import json

import pyarrow.compute as pc
import pyarrow.fs as pafs

from orchestrator.results import compact as compaction
from orchestrator.results.dataset import load_table
from orchestrator.results.location import MANIFEST_DIR, row_file
from orchestrator.results.run_folder import RunFolder
from orchestrator.results.schema import MANIFEST_JSON_FIELDS, MANIFEST_SCHEMA, SCHEMA_VERSION, rows_table
from workloads.messages import Status

# The error of a row an interrupt left unmeasured in a group it cut short (the group's finished
# cases are kept beside it; --resume measures the whole group again)
CUT_SHORT = "not measured: the run was interrupted in this group (--resume measures it again)"


class ResultStore(RunFolder):
    """A run's folder (run_folder.py) that holds rows of ROW_SCHEMA and a manifest."""

    def create(self) -> None:
        self.fs.create_dir(self.run_dir, recursive=True)
        self.fs.create_dir(f"{self.root}/{MANIFEST_DIR}", recursive=True)

    def write_group(self, group_id: str, rows: list[dict]) -> None:
        self.still_the_writer()
        self.write_table(rows_table(rows), f"{self.run_dir}/{group_id}.parquet")

    def write_manifest(self, manifest: dict) -> None:
        """The manifest as one JSON object (its types are MANIFEST_SCHEMA's; times in ISO 8601)."""
        self.still_the_writer()
        record = {"schema_version": SCHEMA_VERSION, "run_id": self.run_id, **manifest}
        unknown = sorted(set(record) - set(MANIFEST_SCHEMA.names))
        if unknown:
            raise KeyError(f"not a manifest field: {', '.join(unknown)}")
        for name in MANIFEST_JSON_FIELDS:  # nested as JSON values, not JSON in strings
            if isinstance(record.get(name), str):
                with contextlib.suppress(ValueError):  # not JSON: kept as the string it is
                    record[name] = json.loads(record[name])
        text = json.dumps(record, default=_iso, indent=1).encode()
        self.put(text, f"{self.root}/{MANIFEST_DIR}/{self.run_id}.json")

    def finished_groups(self, ok_only: bool = False) -> set[str]:
        """Group ids of this run already on disk (for --resume), in group files and compacted
        rows, less the groups an interrupt cut short (rows with error CUT_SHORT: --resume measures
        them again whole); with `ok_only`, only the groups whose every row is ok (--retry-failed)."""
        table = self._groups_table()
        if table is None:
            return set()
        groups = set(table.column("group_id").to_pylist())
        cut = pc.filter(table.column("group_id"), pc.equal(table.column("error"), CUT_SHORT))
        groups -= set(cut.to_pylist())
        if ok_only:
            bad = pc.filter(table.column("group_id"), pc.not_equal(table.column("status"), Status.OK.value))
            groups -= set(bad.to_pylist())
        return groups

    def saved(self) -> tuple[int, int, int]:
        """What this run holds on disk: (groups saved whole, groups an interrupt cut short, ok rows)."""
        table = self._groups_table()
        if table is None:
            return 0, 0, 0
        ids = table.column("group_id")
        cut = set(pc.filter(ids, pc.equal(table.column("error"), CUT_SHORT)).to_pylist())
        ok = int(pc.sum(pc.equal(table.column("status"), Status.OK.value)).as_py() or 0)
        return len(set(ids.to_pylist()) - cut), len(cut), ok

    def _groups_table(self):
        infos = self.fs.get_file_info(pafs.FileSelector(self.run_dir, allow_not_found=True))
        if not any(row_file(i.base_name) for i in infos):
            return None
        return load_table(self.location_of_run(), columns=["group_id", "status", "error"])

    def acquire(self, wait_s: float = 0.0) -> None:
        """Become the run's one writer (lock.py): refused in one line naming the holder when another
        process still holds it after wait_s; then clear what a killed compaction of the run left."""
        self.lock.acquire(wait_s)
        try:
            compaction.clear_leftovers(self)
        except BaseException:
            self.lock.release()
            raise

    def release(self) -> None:
        self.lock.release()

    def compact(self, wait_s: float | None = None) -> int:
        """Rewrite the run's rows as a few part files, under the run's lock (compact.py); returns
        the number of group files merged."""
        return compaction.compact(self, compaction.COMPACT_WAIT_S if wait_s is None else wait_s)


def _iso(value: object) -> str:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
