"""collbench from Python: the same sweeps, qualifications, reports and comparisons as the command
line, for Ray users' own drivers and notebooks (docs/guides/api.md).

    import ray
    from orchestrator import api

    ray.init(address="auto")                        # or let collbench start an embedded instance
    result = api.run(collectives=["all_reduce"], max_bytes="64M", patterns=["intra", "inter"])
    result.rows()                                    # the rows, a pandas DataFrame
    rep = api.report(result)                         # tables and flags
    rep.frame("intra_vs_inter")
    bad = api.preflight(my_placement_group).exclude  # nodes to leave out before trainer.fit()
    api.replay("/dumps/", repeat=3).rows()           # a job's collectives, from its Flight Recorder dumps
    api.import_nccl_tests(["all_reduce.log"], "results").run_id   # nccl-tests' output as a run
    api.plan(inventory="64x8", patterns=["pairwise"]).measurements  # what a run would do, no actor
    api.doctor().status                              # every node checked for what makes collectives fail
    api.watch(cycles=3).cycles[-1].alerts            # canary cycles: alerts, with their evidence
    api.predict("results", params=7e9, dp=64, tp=8).tables["summary"]   # a step's communication, priced

Options are the sweep options' long names with underscores, as in a `--config` YAML file (`max_bytes`
for --max-bytes, `group_timeout="5m"` for --group-timeout), with the same values and the same checks: a bad value raises `UsageError` with
the one line the command prints. In a process whose Ray is initialised already, that session is
used as it is: collbench neither calls ray.init again nor shuts it down. By default nothing is
printed (`verbose=True` prints what the command prints); an unreadable results file is a
`CollbenchWarning`. Nothing here ends the caller's process: a cluster whose ray.init never returns
raises `ConnectTimeout` (a UsageError).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.errors import UsageError
from orchestrator.operations import COMMAND_LINE, QUIET
from orchestrator.operations import attach as attaching
from orchestrator.operations import compare as comparing
from orchestrator.operations import doctor as doctoring
from orchestrator.operations import import_ as importing
from orchestrator.operations import plan as planning
from orchestrator.operations import qualify as qualifying
from orchestrator.operations import replay as replaying
from orchestrator.operations import report as reporting
from orchestrator.operations import run as running
from orchestrator.operations.checks import DROP_THRESHOLD, MIN_FRACTION, PEER_THRESHOLD, Unit
from orchestrator.operations.compare import By, Comparison
from orchestrator.operations.import_ import Imported, Topology
from orchestrator.operations.plan import Planned
from orchestrator.operations.predict import Predicted
from orchestrator.operations.qualify import Qualification
from orchestrator.operations.report import Report
from orchestrator.operations.run import RunResult
from orchestrator.operations.sweeps import SweepSpec, field_of, spec_fields

__all__ = ["Comparison", "Planned", "Predicted", "Preflight", "Qualification", "Report", "RunResult", "UsageError",
           "Watched", "compare", "doctor", "import_nccl_tests", "plan", "predict", "preflight", "qualify", "replay",
           "report", "run", "spec", "watch"]


def spec(base: SweepSpec | None = None, **options: Any) -> SweepSpec:
    """A validated sweep: `base` (or the defaults) with `options` over it, each converted and checked
    as a --config key is (`max_bytes="64M"`, `dtypes=["bfloat16"]`, `env={"NCCL_ALGO": "Ring"}`)."""
    return running.SWEEPS.spec(base, options)


def run(sweep: SweepSpec | None = None, /, *, nodes: Sequence[str] | None = None, placement_group=None,
        resume: str | None = None, retry_failed: bool = False, doctor: bool = True, verbose: bool = False,
        run_id: str | None = None, **options: Any) -> RunResult:
    """Measure a sweep; returns its RunResult (rows, manifest, how it ended). `nodes`: only these
    (IP, host name or Ray node id); `placement_group`: a placement group the caller holds, one rank
    per bundle, on its bundles' nodes; `resume`: finish that run of `output` (only the groups it
    lacks, with its own sweep; an option given here that would change what it measures is refused),
    `retry_failed` measuring its failed groups again; `run_id`: the run's name (a run of that id in
    `output` that did not finish is resumed, one that finished is not measured again); `doctor`: the
    quick checks before the first group (a failed one raises UsageError naming the node)."""
    given = _with_nodes(nodes, options)
    chosen = running.RunOptions(sweep=spec(sweep, **given), resume=resume, retry_failed=retry_failed, doctor=doctor,
                                run_id=run_id,
                                given=frozenset(f.name for f in map(field_of, given) if f is not None) | _set_in(sweep))
    return running.run(chosen, voice=COMMAND_LINE if verbose else QUIET, placement_group=placement_group,
                       progress=verbose)


def replay(dumps: str | Sequence[str], /, *, repeat: int = 3, gaps: bool = False, ops_per_step: int | None = None,
           trace_ranks_per_node: int | None = None, nodes: Sequence[str] | None = None, doctor: bool = True,
           verbose: bool = False, **options: Any) -> RunResult:
    """Run a training job's collectives again from its Flight Recorder dumps (files or folders),
    as `collbench replay`; returns the RunResult (rows: pattern "replay"). Options as the command's
    (backend, ranks_per_node, output, address, env, group_timeout, ...; any other is refused)."""
    chosen = replaying.ReplayOptions(
        dumps=(dumps,) if isinstance(dumps, str) else tuple(dumps), sweep=replaying.SWEEPS.spec(
            None, _with_nodes(nodes, options)), repeat=repeat, gaps=gaps, ops_per_step=ops_per_step,
        trace_ranks_per_node=trace_ranks_per_node, doctor=doctor)
    return replaying.replay(chosen, voice=COMMAND_LINE if verbose else QUIET, progress=verbose)


def qualify(sweep: SweepSpec | None = None, /, *, nodes: Sequence[str] | None = None, placement_group=None,
            threshold: float = PEER_THRESHOLD, min_fraction: float = MIN_FRACTION, seed: int = 0,
            expected: str | None = None, scheduler: str = "auto", drain: bool = False,
            doctor: bool = True, verbose: bool = False, topology: str | None = None, run_id: str | None = None,
            **options: Any) -> Qualification:
    """Name the slow, hanging, failing and lost nodes: a Qualification with a verdict and its
    evidence per node (`.failing`: those that did not pass). Options as `collbench qualify`'s (any
    other is refused); without `sweep`, qualify's defaults under them (all_reduce 1M-16M, 5
    iterations), with it, that sweep as given. `.actions` by node IP: the command that takes a
    node that did not pass out of its scheduler's service; `drain=True` runs it (`.drained`).
    `topology`: the switch tree (a topology.conf or YAML file; "none": none; default: inside a Slurm
    job, `scontrol show topology`): a slow uplink is named in `.uplinks`, its nodes not. `run_id`: the
    run's name (default: a new one). SIGUSR1 ends it after the round in flight with the verdicts so far
    (`.unsettled`: the nodes without one)."""
    chosen = qualifying.QualifyOptions(sweep=qualifying.qualify_spec(sweep, _with_nodes(nodes, options)),
                                       threshold=threshold, min_fraction=min_fraction, seed=seed, expected=expected,
                                       doctor=doctor, scheduler=scheduler, drain=drain, topology=topology,
                                       run_id=run_id)
    return qualifying.qualify(chosen, voice=COMMAND_LINE if verbose else QUIET, log=sys.stdout if verbose else None,
                              placement_group=placement_group)


@dataclass
class Preflight:
    """A quick qualification of exactly the nodes a job was given: which to leave out, and why."""

    qualification: Qualification

    @property
    def exclude(self) -> list[str]:
        """IP addresses of the nodes that did not pass (empty: go)."""
        return [v.node for v in self.qualification.failing]

    @property
    def ok(self) -> bool:
        """Finished, no node to exclude and no slow uplink."""
        return self.qualification.finished and not self.exclude and not self.qualification.uplinks


def preflight(target=None, /, *, timeout_s: float = 60.0, verbose: bool = False, **options: Any) -> Preflight:
    """Qualify exactly a job's nodes before its first step: `target` is a placement group the caller
    holds (its bundles' nodes, one rank per bundle) or a list of nodes (IP, host name or node id);
    None: every node. `timeout_s` bounds each probe group (forming it and each size). Returns the
    nodes to exclude (`.exclude`) with the evidence (`.qualification`)."""
    if isinstance(target, (list, tuple)):
        found = qualify(nodes=target, verbose=verbose, group_timeout=timeout_s, **options)
    else:
        found = qualify(placement_group=target, verbose=verbose, group_timeout=timeout_s, **options)
    return Preflight(found)


def report(source: str | RunResult, *, run_id: str | None = None, threshold: float = PEER_THRESHOLD,
           unit: Unit = "GBps",
           collective: str | None = None, expected: str | None = None, min_fraction: float = MIN_FRACTION,
           topology: str | None = None) -> Report:
    """The report of a run: `source` is a RunResult or a results dataset (its latest run, or
    `run_id`). Tables as `.tables` (lists of dicts) or `.frame(name)` (DataFrames); flags as `.flags`.
    `topology`: the fabric's switch tree (a topology.conf or YAML file): a slow uplink is named. A run
    whose manifest says running while its driver, of this host, is dead gets its manifest marked
    interrupted (results/left_behind.py), as `collbench report` does."""
    if isinstance(source, RunResult):
        source, run_id = source.output, source.run_id
    return reporting.report(reporting.ReportOptions(path=source, run_id=run_id, collective=collective,
                                                    threshold=threshold, unit=unit, expected=expected,
                                                    min_fraction=min_fraction, topology=topology)).report


def compare(baseline: str, new: str | None = None, *, baseline_runs: Sequence[str] | None = None,
            new_run: str | None = None, threshold: float = DROP_THRESHOLD, by: By = "link") -> Comparison:
    """Compare a new run with baseline runs of the same sweep, as `collbench compare` does; the
    flagged drops are `.flagged` (a DataFrame: empty when nothing regressed)."""
    return comparing.compare(comparing.CompareOptions(
        baseline=baseline, new=new, baseline_runs=tuple(baseline_runs or ()), new_run=new_run,
        threshold=threshold, by=by))


def import_nccl_tests(paths: str | Sequence[str], output: str, *, hosts: Sequence[str] = (),
                      topology: Topology | None = None, run_id: str | None = None,
                      collective: str | None = None) -> Imported:
    """nccl-tests output files as a run of `output`, as `collbench import` does; then `report(output,
    run_id=...)` and `compare` read it. A bad file or option raises UsageError, nothing written."""
    return importing.import_run(importing.ImportOptions(
        paths=(paths,) if isinstance(paths, str) else tuple(paths), output=output, hosts=tuple(hosts),
        topology=topology, run_id=run_id, collective=collective))


@dataclass
class Watched:
    """The cycles a watch ran (each with its alerts, what it checked, its run ids), what it said
    (`lines`: where it ran, partitions dropped, why it ended) and how it ended: exit 0 after its
    cycles or a signal, 1 when the cluster was lost past the reconnect timeout."""

    cycles: list
    lines: list[str]
    exit_code: int


def attach(dumps: str | Sequence[str], /, *, hang_after: str | float = "30s", min_late_ms: float = 5.0,
           hosts: Sequence[str] = ()) -> attaching.Look:
    """A job's Flight Recorder dumps (a folder, or files) judged once for a hang and for chronic
    stragglers: `.attached.hang`, `.attached.stragglers`, `.where(rank)` (`collbench attach`)."""
    paths = (dumps,) if isinstance(dumps, str) else tuple(dumps)
    return next(attaching.looks(attaching.AttachOptions(paths, hang_after, min_late_ms, tuple(hosts))))


def watch(sweep: SweepSpec | None = None, /, *, cycles: int = 1, every: str | float = "5m", baseline_cycles: int = 5,
          retention: str | float | None = None, reconnect_timeout: str | float = "5m",
          threshold: float = PEER_THRESHOLD, expected: str | None = None, min_fraction: float = MIN_FRACTION,
          nodes: Sequence[str] | None = None, doctor: bool = True, scheduler: str = "auto", drain: bool = False,
          topology: str | None = None, on_cycle=None, verbose: bool = False, **options: Any) -> Watched:
    """`collbench watch` from Python: `cycles` canary cycles (0: until SIGTERM), each given to
    `on_cycle` as it ends. One call is one watch, as one command is: the alerts that need several
    cycles (blind after 3 that measured nothing, intermittent when doubted in 2 of 6) are raised
    within a call, and a later call starts its rolling baseline from the cycles stored in `output`.
    Options as the command's (its canary's defaults: all_reduce 1M and 16M, every pair and every
    node's own group); `scheduler`, `drain` and `topology` as qualify's (each named node's command
    is on its cycle: `.actions`, and under `drain` `.drained`); `verbose` prints the command's lines."""
    from orchestrator.operations import watch as watching

    given = _with_nodes(nodes, options)
    ranks_given = "ranks_per_node" in given or (sweep is not None
                                                and sweep.ranks_per_node != SweepSpec().ranks_per_node)
    chosen = watching.WatchOptions(
        sweep=watching.SWEEPS.spec(sweep, given), every=every, cycles=cycles, baseline_cycles=baseline_cycles,
        retention=retention, reconnect_timeout=reconnect_timeout, threshold=threshold, expected=expected,
        min_fraction=min_fraction, doctor=doctor, fit_ranks=not ranks_given, scheduler=scheduler, drain=drain,
        topology=topology)
    seen: list = []
    said: list[str] = []

    def emit(cycle) -> None:
        seen.append(cycle)
        if verbose:
            print(cycle.line(), flush=True)
        if on_cycle is not None:
            on_cycle(cycle)

    def say(line: str) -> None:
        said.append(line)
        if verbose:
            print(line, file=sys.stderr, flush=True)

    code = watching.watch(chosen, emit=emit, say=say)
    return Watched(seen, said, code)


def predict(path: str, /, **options: Any) -> Predicted:
    """The per-step communication time of a training layout priced from a run's fits, as `collbench predict`:
    `.tables` (summary, terms; what_if and what_if_terms beside them), `.incomplete` (terms no accepted
    fit prices, why, and a run whose fits would). Options as the command's with underscores: run, params
    (a number), dp, tp, pp, layers, hidden, seq, micro_batch, micro_batches, ranks_per_node, fsdp,
    dtype, bucket_bytes, what_if (["dp=32", ...]), what_if_results ([PATH, RUN_ID]), trace (dumps),
    ops_per_step, replay_run."""
    from orchestrator.operations import predict as predicting

    known = {f.name for f in dataclasses.fields(predicting.PredictOptions)} - {"path"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise UsageError(f"collbench.api: key {unknown[0]!r} is not an option of collbench predict (its keys: "
                         f"{', '.join(sorted(known))})")
    for key in ("what_if", "what_if_results", "trace"):
        if key in options:
            value = options[key]
            options[key] = (value,) if isinstance(value, str) else tuple(value)
    return predicting.predict(predicting.PredictOptions(path=path, **options))


def plan(sweep: SweepSpec | None = None, /, *, inventory: str | None = None, **options: Any) -> Planned:
    """The rounds and groups a run with these options would form (`.plan`), on which nodes
    (`.inventory`) and how many measurements (`.measurements`), as `collbench plan` prints them;
    against the live cluster, or `inventory` ("64x8", "4x2cpu", "36x4/18"). Options as the
    command's (any other is refused); creates no actor."""
    return planning.plan(planning.PlanOptions(sweep=planning.SWEEPS.spec(sweep, options), inventory=inventory))


def doctor(*, nodes: Sequence[str] | None = None, **options: Any):
    """Every node checked at once, as `collbench doctor` does: a Diagnosis (`.status`: ok, warn or
    fail; `.cluster` and `.nodes`: the checks; `.to_json()`: the command's JSON). Options: address,
    ranks_per_node, exclude."""
    return doctoring.doctor(doctoring.SWEEPS.spec(None, _with_nodes(nodes, options)))


def _set_in(sweep: SweepSpec | None) -> frozenset[str]:
    """The fields a caller's sweep sets (differing from the defaults; its output aside): given, as
    options are, to a resumed run, which refuses one that would change what it measures."""
    if sweep is None:
        return frozenset()
    plain = SweepSpec()
    return frozenset(f.name for f in spec_fields() if f.name != "output" and getattr(sweep, f.name) !=
                     getattr(plain, f.name))


def _with_nodes(nodes: Sequence[str] | None, options: dict) -> dict:
    if nodes is None:
        return options
    if isinstance(nodes, str):
        raise UsageError(f"nodes {nodes!r}: a list of nodes, not one string")
    return {**options, "nodes": list(nodes)}

