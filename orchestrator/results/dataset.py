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
import warnings
from collections import Counter
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from orchestrator.errors import CollbenchWarning, UsageError, first_line
from orchestrator.results.location import MANIFEST_DIR, PART_PREFIX, resolve
from orchestrator.results.schema import MANIFEST_JSON_FIELDS, MANIFEST_SCHEMA, ROW_SCHEMA, SCHEMA_VERSION

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


_READ_ERRORS = (OSError, pa.ArrowException)


class CorruptManifest(UsageError):
    """A run's manifest exists but cannot be read: `report` warns and goes on, `--resume` stops."""


class _Rows:
    """The dataset as scans: group files, and part files less the groups those replace. A file
    that cannot be read as rows (truncated, or a foreign file whose columns clash with ours) is
    left out and named in `skipped`, and the rest is read."""

    def __init__(self, path: str) -> None:
        if not path.strip():  # '' would be the working directory, read through
            raise UsageError(f"{path!r}: empty path (name a results folder)")
        self.path = path
        self.fs, root = resolve(path)
        try:
            self.by_dir = row_files(self.fs, root)
        except (*_READ_ERRORS, ValueError) as e:  # ValueError: a NUL in the path
            raise UsageError(f"{path!r}: cannot list it ({first_line(e)})") from None
        if not self.by_dir:
            missing = self.fs.get_file_info(root).type == pafs.FileType.NotFound
            raise UsageError(f"{path}: no such folder (`collbench run` writes to results; name the folder it wrote to)"
                             if missing else f"{path}: no result rows (no Parquet files)")
        self.skipped: list[str] = []
        self._scan()

    def _scan(self) -> None:
        """`scans`: (files, the filter of their own rows), read as one dataset each."""
        groups, self.scans = [], []
        for paths in self.by_dir.values():
            parts = [p for p in paths if posixpath.basename(p).startswith(PART_PREFIX)]
            singles = [p for p in paths if p not in parts]
            groups += singles
            if parts:
                replaced = [posixpath.basename(p)[: -len(".parquet")] for p in singles]
                self.scans.append((parts, ~pads.field("group_id").isin(replaced) if replaced else None))
        if groups:
            self.scans.append((groups, None))

    def table(self, columns: list[str], flt: pads.Expression | None, dictionary: tuple[str, ...] = ()) -> pa.Table:
        """The rows `flt` keeps (None: every row), their `columns`; those named in `dictionary`
        (strings) read as Arrow dictionaries, as Parquet stores them: no string is copied."""
        try:
            return self._read(columns, flt, dictionary)
        except _READ_ERRORS:
            if not self._leave_out_unreadable(columns, flt, dictionary):
                raise
        return self._read(columns, flt, dictionary)

    def _dataset(self, paths: list[str], dictionary: tuple[str, ...]) -> pads.Dataset:
        schema = pa.schema([f.with_type(pa.dictionary(pa.int32(), f.type)) if f.name in dictionary else f
                            for f in ROW_SCHEMA])
        fmt = pads.ParquetFileFormat(read_options=pads.ParquetReadOptions(dictionary_columns=dictionary))
        return pads.dataset(paths, filesystem=self.fs, format=fmt, schema=schema)

    def _read(self, columns: list[str], flt: pads.Expression | None, dictionary: tuple[str, ...]) -> pa.Table:
        if not self.scans:
            return self._dataset([], dictionary).schema.empty_table().select(columns)
        both = lambda own: own if flt is None else flt if own is None else flt & own  # noqa: E731
        return pa.concat_tables([self._dataset(paths, dictionary).to_table(columns=columns, filter=both(own))
                                 for paths, own in self.scans])

    def _leave_out_unreadable(self, columns: list[str], flt: pads.Expression | None,
                              dictionary: tuple[str, ...]) -> bool:
        """After a failed read (the common path reads no file twice): try each file alone with
        the same columns and filter, and leave out those that fail. Whether any was left out."""
        bad = {}
        for paths in self.by_dir.values():
            for p in paths:
                try:
                    self._dataset([p], dictionary).to_table(columns=columns, filter=flt)
                except _READ_ERRORS as e:
                    bad[p] = first_line(e)
        if not bad:
            return False
        self.skipped += [f"{p}: skipped, not readable as collbench rows ({why[:120]})" for p, why in bad.items()]
        self.by_dir = {d: [p for p in paths if p not in bad] for d, paths in self.by_dir.items()}
        self._scan()
        return True

    def warn(self) -> None:
        for line in self.skipped:  # a warning, not a print: a Python caller's stderr is its own
            warnings.warn(line, CollbenchWarning, stacklevel=3)


def load(path: str, run_id: str | None = None, latest: bool = True, columns: list[str] | None = None) -> pd.DataFrame:
    """Rows of one run (`run_id`, else the latest when `latest`, else all runs)."""
    return load_table(path, run_id, latest, columns).to_pandas()


def load_table(path: str, run_id: str | None = None, latest: bool = True,
               columns: list[str] | None = None, dictionary: tuple[str, ...] = ()) -> pa.Table:
    """`load` as an Arrow table (columnar work, no pandas objects for list columns); the string
    columns named in `dictionary` come as Arrow dictionaries (pandas categoricals)."""
    rows = _Rows(path)
    ours = pads.field("schema_version").is_valid()
    try:
        every = rows.table(["schema_version", "run_id", "started_at"], None)
    except _READ_ERRORS as e:
        raise UsageError(f"{path}: not a collbench results dataset ({first_line(e)})") from None
    foreign = every.column("schema_version").null_count  # rows of Parquet files that are not ours
    index = every.filter(pc.is_valid(every.column("schema_version"))) if foreign else every
    if index.num_rows == 0:
        left_out = f"; {len(rows.skipped)} unreadable: {rows.skipped[0]}" if rows.skipped else ""
        raise UsageError(f"{path}: no collbench result rows (no Parquet file with a schema_version{left_out})")
    newest = pc.max(index.column("schema_version")).as_py()
    if newest > SCHEMA_VERSION:
        raise UsageError(f"{path}: schema_version {newest} is newer than this collbench reads "
                         f"(up to {SCHEMA_VERSION}); upgrade collbench")
    if run_id is None and latest:
        started = index.column("started_at")
        newest_row = pc.index(started, pc.max(started)).as_py() if started.null_count < len(started) else 0
        run_id = index.column("run_id")[max(newest_row, 0)].as_py()  # the latest run (by its start)
    flt = ours if run_id is None else ours & (pads.field("run_id") == run_id)
    runs_held = pc.unique(index.column("run_id"))
    if not foreign and (run_id is None or runs_held.to_pylist() == [run_id]):
        flt = None  # every row is ours and of this run (the common case): no row to test
    # a foreign file's column may not cast to a dictionary (an int run_id): those are read as before
    table = rows.table(columns or COLUMNS, flt, () if foreign else dictionary)
    if table.num_rows == 0:
        known = sorted(set(index.column("run_id").to_pylist()))
        shown = run_id[:80] if run_id.isprintable() else repr(run_id[:80])
        raise UsageError(f"--run {shown}: no such run in {path} (runs: {', '.join(known[-5:])})")
    rows.warn()
    return table


def runs(path: str) -> list[str]:
    """Run ids in the dataset, oldest first."""
    df = load(path, latest=False, columns=["run_id", "started_at"]).drop_duplicates()
    return list(df.sort_values("started_at").run_id)


PROBE_COMMANDS = ("qualify", "watch")  # runs that probe the cluster for a verdict, not sweeps to read


@dataclass(frozen=True)
class Pick:
    """The run a command took where none was named: the latest sweep, and the newer probes it passed over."""

    run_id: str
    runs: int = 1  # runs the dataset holds
    passed_over: tuple[tuple[str, str], ...] = ()  # (run id, command), newest first

    def note(self, path: str) -> str | None:
        """One line: which run was taken, and why not a newer one; None where the dataset holds one run."""
        if not self.passed_over:
            return f"run {self.run_id}: the latest of {self.runs} in {path}" if self.runs > 1 else None
        kinds = ", ".join(f"{n} {c}" for c, n in Counter(c for _, c in self.passed_over).items())
        return (f"run {self.run_id}: the latest sweep in {path} (passed over {kinds} run(s) newer than it, "
                f"{self.passed_over[0][0]} the newest)")


def command_of(path: str, run_id: str) -> str | None:
    """The command that made a stored run (its manifest's), None when its manifest is missing or unreadable."""
    try:
        m = manifest(path, run_id)
    except CorruptManifest:
        return None
    return m.get("command") if m else None


def latest_sweep(path: str, known: list[str] | None = None) -> Pick:
    """The latest run of `path` that is not a probe (PROBE_COMMANDS: qualify's rounds, watch's cycles);
    the latest of all where every run is one. `known`: the dataset's runs, oldest first, where read."""
    if known is None:
        with warnings.catch_warnings():  # a file it skips is named once, by the read that follows
            warnings.simplefilter("ignore", CollbenchWarning)
            known = runs(path)
    passed: list[tuple[str, str]] = []
    for run_id in reversed(known):
        command = command_of(path, run_id)
        if command not in PROBE_COMMANDS:
            return Pick(run_id, len(known), tuple(passed))
        passed.append((run_id, command))
    return Pick(known[-1], len(known))


def manifest(path: str, run_id: str) -> dict | None:
    """The run's manifest as a dict (MANIFEST_SCHEMA's fields), or None when it has none.
    Reads the JSON of today and the one-row Parquet of schema_version 1."""
    fs, root = resolve(path)
    if fs.get_file_info(root).type == pafs.FileType.File:
        root = posixpath.dirname(posixpath.dirname(root))  # a row file <root>/<run>/<group>.parquet
    base = f"{root}/{MANIFEST_DIR}/{run_id}"
    try:
        with fs.open_input_stream(base + ".json") as f:
            data = f.read()
    except FileNotFoundError:
        data = None
    except _READ_ERRORS as e:
        raise CorruptManifest(f"{base}.json: the run's manifest is unreadable ({first_line(e)})") from None
    if data is not None:
        try:
            record = json.loads(data)
            if not isinstance(record, dict):
                raise TypeError(f"a JSON {type(record).__name__}, not an object")
            for field in MANIFEST_SCHEMA:
                if pa.types.is_timestamp(field.type) and isinstance(record.get(field.name), str):
                    record[field.name] = dt.datetime.fromisoformat(record[field.name])
            for name in MANIFEST_JSON_FIELDS:  # nested in the file, a JSON string in memory
                if record.get(name) is not None and not isinstance(record[name], str):
                    record[name] = json.dumps(record[name])
            known = {f.name for f in MANIFEST_SCHEMA}  # keys of a newer collbench are left to it
            return pa.Table.from_pylist([{k: v for k, v in record.items() if k in known}],
                                        schema=MANIFEST_SCHEMA).to_pylist()[0]
        except (ValueError, TypeError, RecursionError, pa.ArrowException) as e:  # RecursionError: nested too deep
            raise CorruptManifest(f"{base}.json: the run's manifest is corrupt ({first_line(e)[:160]})") from None
    try:
        table = pq.read_table(base + ".parquet", filesystem=fs)
    except FileNotFoundError:
        return None
    except _READ_ERRORS as e:
        raise CorruptManifest(f"{base}.parquet: the run's manifest is corrupt ({first_line(e)[:160]})") from None
    return {name: table.column(name)[0].as_py() for name in table.column_names}
