"""The report of one stored run: its rows, its manifest, and the tables and flags built from
them (`collbench report` and `api.report`; `watch` reads each cycle's flags through it)."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.analysis import report as reports
from orchestrator.analysis.frame import COLUMNS, DICTIONARY, Frame
from orchestrator.errors import UsageError
from orchestrator.judging.defaults import MIN_FRACTION, PEER_THRESHOLD
from orchestrator.operations.checks import UNITS, Unit, check_min_fraction, check_threshold, check_unit, user_expected
from orchestrator.results import dataset


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

    def __post_init__(self) -> None:
        check_threshold(self.threshold)
        check_unit(self.unit)
        check_min_fraction(self.min_fraction)


@dataclass(frozen=True)
class Reported:
    """A run's rows and the report built from them (the plots and the HTML page read both)."""

    frame: Frame
    report: reports.Report

    @property
    def run_id(self) -> str:
        return str(self.frame.df.run_id.iloc[0])


def report(options: ReportOptions) -> Reported:
    """The report of the run `options` name; UsageError for a dataset, run or file that cannot be used."""
    user = user_expected(options.expected)
    frame = run_frame(options.path, options.run_id, options.collective)
    return Reported(frame, read_report(options.path, frame, options.threshold, options.unit, options.collective,
                                       user, options.min_fraction))


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
    return reports.build(frame, manifest, threshold, unit, UNITS[unit], collective, user or [], min_fraction,
                         manifest_problem=problem)
