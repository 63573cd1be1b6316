"""The report of one stored run: its rows, its manifest, and the tables and flags built from
them (`collbench report` and `api.report`; `watch` reads each cycle's flags through it)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from orchestrator.analysis import report as reports
from orchestrator.analysis.frame import COLUMNS, DICTIONARY, Frame
from orchestrator.analysis.report import COLUMNS as TABLE_COLUMNS
from orchestrator.analysis.report import TABLES, Report, title
from orchestrator.errors import UsageError
from orchestrator.judging.defaults import MIN_FRACTION, PEER_THRESHOLD
from orchestrator.operations.checks import UNITS, Unit, check_min_fraction, check_threshold, check_unit, user_expected
from orchestrator.results import dataset, nccl_tests
from orchestrator.results.left_behind import settle
from orchestrator.results.location import check_writable, is_uri
from orchestrator.results.schema import RunState
from orchestrator.results.store import CUT_SHORT
from orchestrator.sweep import topology
from workloads.messages import Status

__all__ = ["TABLES", "TABLE_COLUMNS", "Report", "ReportOptions", "Reported", "check_plotting", "nccl_tests_blocks",
           "plots_dir", "read_report", "report", "run_frame", "title", "which_run"]


@dataclass(frozen=True, kw_only=True)
class ReportOptions:
    """What to report, checked when made."""

    path: str
    """The results dataset: a folder, a Parquet file, or an s3://, gs:// URI."""
    run_id: str | None = None
    """The run to report; None: the dataset's latest."""
    collective: str | None = None
    """Report only this collective (it must be in the run); None: every one measured."""
    threshold: float = PEER_THRESHOLD
    """Flag values this fraction worse than their peers."""
    unit: Unit = "GBps"
    """Bandwidth unit of the tables: GBps (1e9 bytes/s) or Gbps (1e9 bits/s)."""
    expected: str | None = None
    """A YAML file of the user's expected values, over the shipped table."""
    min_fraction: float = MIN_FRACTION
    """Flag a measurement below this fraction of its expected value."""
    topology: str | None = None
    """The fabric's switch tree (Slurm's topology.conf, or its YAML form): pairs judged inside and
    across leaves apart, a slow uplink named as the switch."""

    def __post_init__(self) -> None:
        check_threshold(self.threshold)
        check_unit(self.unit)
        check_min_fraction(self.min_fraction)


@dataclass(frozen=True)
class Reported:
    """A run's rows and the report built from them (the plots and the HTML page read both)."""

    frame: Frame
    report: reports.Report
    picked: dataset.Pick | None = None  # the run taken where none was named

    @property
    def run_id(self) -> str:
        return str(self.frame.df.run_id.iloc[0])

    def html_page(self) -> str:
        """The whole report as one self-contained HTML page (needs the plot extra: check_plotting)."""
        from orchestrator.analysis import html

        return html.render(self.report, self.frame, UNITS[self.report.unit])

    def write_plots(self, folder: str) -> list[str]:
        """The run's plots as PNG files in `folder` (plots_dir chose and checked it); their paths."""
        from orchestrator.analysis import plots

        return plots.write(self.frame, folder, UNITS[self.report.unit], self.report.unit)


def check_plotting() -> None:
    """Refused in one line where the plot extra (matplotlib) is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError("--plots and --format html need matplotlib (a dependency of collbench): "
                         "pip install 'matplotlib>=3.7'") from None


def plots_dir(path: str, plots: str, run_id: str) -> str:
    """Where a report's plots go: the given folder, or PATH/_plots/RUN_ID. A folder inside the
    dataset must sit below a name starting with '_' or '.', or pandas.read_parquet(PATH) would read
    the PNGs. Checked writable, before the report prints: a refusal leaves nothing said twice."""
    if not plots:
        if is_uri(path):
            raise UsageError(f"--plots: name a local folder for the plots of {path}")
        return os.path.join(path, "_plots", run_id)
    if not is_uri(path):
        rel = os.path.relpath(os.path.abspath(plots), os.path.abspath(path))
        inside = not rel.startswith("..")
        if inside and not any(part.startswith(("_", ".")) for part in rel.split(os.sep)):
            raise UsageError(f"--plots {plots}: inside the results dataset, where pandas.read_parquet({path!r}) "
                             f"would try the PNGs as Parquet; use {os.path.join(path, '_plots')} or a folder outside")
    check_writable(plots, "--plots")
    return plots


def report(options: ReportOptions) -> Reported:
    """The report of the run `options` name (the latest sweep where none is: `which_run`);
    UsageError for a dataset, run or file that cannot be used."""
    user = user_expected(options.expected)
    tree = topology.read(options.topology) if options.topology else None  # a bad file refused first
    picked = which_run(options.path, options.run_id)
    frame = run_frame(options.path, picked.run_id if picked else options.run_id, options.collective)
    if tree is not None:
        leaf_of = topology.place(tree, frame.names)
        frame.leaves, frame.parents = {code: leaf_of[ip] for code, ip in enumerate(frame.nodes)}, tree.parent_of()
    return Reported(frame, read_report(options.path, frame, options.threshold, options.unit, options.collective,
                                       user, options.min_fraction), picked)


def which_run(path: str, run_id: str | None) -> dataset.Pick | None:
    """None where a run is named; else the latest sweep of the dataset (a qualify or watch run newer
    than it passed over, and said: `Pick.note`)."""
    return None if run_id is not None else dataset.latest_sweep(path)


def run_frame(path: str, run_id: str | None = None, collective: str | None = None) -> Frame:
    """One run's rows (the latest without `run_id`), checked to hold `collective` where one is named."""
    frame = Frame(dataset.load_table(path, run_id, columns=COLUMNS, dictionary=DICTIONARY))
    if collective is not None and collective not in set(frame.df.collective):
        measured = ", ".join(dict.fromkeys(frame.df.collective.dropna()))
        raise UsageError(f"--collective {collective[:80]!r}: not in run {frame.df.run_id.iloc[0]} "
                         f"(measured: {measured})")
    return frame


def read_report(path: str, frame: Frame, threshold: float = PEER_THRESHOLD, unit: str = "GBps",
                collective: str | None = None, user: list | None = None,
                min_fraction: float = MIN_FRACTION) -> reports.Report:
    """The report of `frame`'s run of the dataset at `path` (its manifest read there; a corrupt one
    is a warning of the report, the rows are still worth one)."""
    try:
        manifest, problem = dataset.manifest(path, frame.df.run_id.iloc[0]), None
    except dataset.CorruptManifest as e:
        manifest, problem = None, str(e)
    if manifest and manifest.get("state") == RunState.RUNNING:  # or killed outright: its lock says, and it is marked
        df = frame.df
        cut = set(df.group[df.error == CUT_SHORT]) if "error" in df else set()
        manifest = settle(path, str(df.run_id.iloc[0]), manifest, len(set(df.group) - cut), "collbench report")
    return reports.build(frame, manifest, threshold, unit, UNITS[unit], collective, user or [], min_fraction,
                         manifest_problem=problem)


def nccl_tests_blocks(options: ReportOptions) -> tuple[list[dict], dataset.Pick | None]:
    """The run's rows in nccl-tests' layout (`collbench report --format nccl-tests`): one block per
    collective, dtype, op and group shape (only `options.collective`'s where one is named); and the
    run taken where none was named."""
    picked = which_run(options.path, options.run_id)
    frame = run_frame(options.path, picked.run_id if picked else options.run_id, options.collective)
    if options.collective:  # checked by run_frame: the run has it
        frame.df = frame.df[frame.df.collective == options.collective]
    return _blocks(frame), picked


_BLOCK = ["collective", "dtype", "op", "topology", "world_size", "n_nodes"]


def _blocks(frame: Frame) -> list[dict]:
    """The ok rows of a run as render_nccl_tests' blocks: one per collective, dtype, op and group
    shape, in the run's order; a size's figures the median over the shape's groups (#wrong: the sum)."""
    df = frame.df[frame.df.status == Status.OK]
    if df.empty:
        raise UsageError(f"run {frame.df.run_id.iloc[0]}: no ok row to print in nccl-tests' layout")
    figures = df.groupby(_BLOCK + ["msg_bytes", "in_place"], sort=False, dropna=False, observed=True).agg(
        time_us=("time_us", "median"), algbw_gbps=("algbw_gbps", "median"), busbw_gbps=("busbw_gbps", "median"),
        n_wrong=("n_wrong", lambda s: None if s.isna().all() else int(s.sum())), count=("count", "first"),
        groups=("group", "nunique")).reset_index()
    blocks = []
    for key, rows in figures.groupby(_BLOCK, sort=False, dropna=False, observed=True):
        collective, dtype, op, topology, world_size, n_nodes = key
        b = {"collective": collective, "binary": nccl_tests.BINARIES.get(collective, collective),
             "dtype": nccl_tests.TYPE_NAMES.get(dtype, dtype), "op": op, "world_size": int(world_size),
             "title": f"collbench run {frame.df.run_id.iloc[0]}: {collective} {dtype} {op}, topology {topology}, "
                      f"{world_size} rank(s) on {n_nodes} node(s), median of {int(rows.groups.max())} group(s)",
             "rows": {}}
        for r in rows.sort_values("msg_bytes", kind="stable").itertuples():
            placed = b["rows"].setdefault(int(r.msg_bytes), {"count": int(r.count)})
            placed[bool(r.in_place)] = {"time_us": _number(r.time_us), "algbw_gbps": _number(r.algbw_gbps),
                                        "busbw_gbps": _number(r.busbw_gbps), "n_wrong": r.n_wrong}
        blocks.append(b)
    return blocks


def _number(value) -> float | None:
    return None if value is None or value != value else float(value)
