"""`collbench qualify`, `api.qualify` and `api.preflight`: what a qualification takes, checked when
made (its sweep: qualify's own defaults, one collective, one element type; how probes are judged),
and the one call that runs it (the body, shared with watch, is operations.qualifying)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TextIO

from orchestrator import scheduler
from orchestrator.errors import UsageError
from orchestrator.execution.voice import COMMAND_LINE, Voice
from orchestrator.judging.defaults import MIN_FRACTION, PEER_THRESHOLD
from orchestrator.operations.checks import check_min_fraction, check_threshold, user_expected
from orchestrator.operations.qualifying import Qualification, qualification
from orchestrator.operations.sweeps import NONE, Sweeps
from orchestrator.results import dataset
from orchestrator.results.location import check_writable, resolve_output
from orchestrator.scheduler import Scheduler
from orchestrator.sweep import topology
from orchestrator.sweep.qualify_switches import said as uplink_line
from orchestrator.sweep.qualify_types import NodeVerdict, Outcome
from orchestrator.sweep.resume import check_run_id
from orchestrator.sweep.spec import ALL, SweepSpec
from orchestrator.sweep.topology import Topology
from workloads.dtypes import ELEMENT_BYTES
from workloads.registry import COLLECTIVES

__all__ = ["COLLECTIVES", "DEFAULTS", "DTYPES", "SCHEDULERS", "SWEEPS", "NodeVerdict", "Outcome", "Qualification", "QualifyOptions", "check_spec", "qualify",
           "qualify_spec", "uplink_line"]

# The sweep qualify takes (its command line's sweep options, its --config keys, the API's keyword
# options; any other is refused, from every face) and where its defaults differ from a run's: one
# collective at a few large sizes, few iterations, and a short deadline, since a probe is a health
# check, not a measurement to keep.
SWEEPS = Sweeps("collbench qualify",
                fields=("collectives", "dtypes", "min_bytes", "max_bytes", "step_factor", "iters", "warmup",
                        "check_iters", "backend", "ranks_per_node", "group_timeout_s", "deadline_rate_gbps", "output",
                        "address", "verbose", "env", "expect_net", "nodes", "exclude", "wait_nodes"),
                defaults=MappingProxyType({"collectives": ("all_reduce",), "min_bytes": 1 << 20,
                                           "max_bytes": 16 << 20, "iters": 5, "warmup": 1, "group_timeout_s": 60.0}))
DEFAULTS = SWEEPS.defaults
DTYPES = tuple(ELEMENT_BYTES)  # what --dtypes may name (one of them)
SCHEDULERS = ("auto", *(s.value for s in Scheduler))  # what --scheduler may name


@dataclass(frozen=True, kw_only=True)
class QualifyOptions:
    """What to probe and how probes are judged, checked when made."""

    sweep: SweepSpec = field(default_factory=lambda: SweepSpec(**DEFAULTS))
    """The probes' sweep (qualify_spec makes it from a face's options): one collective, one dtype."""
    threshold: float = PEER_THRESHOLD
    """Without an expected value, a probe this fraction below what the fastest agreeing probes delivered (and
    below their noise) is slow."""
    min_fraction: float = MIN_FRACTION
    """With an expected value, a probe below this fraction of it is slow."""
    seed: int = 0
    """Seed of the random pairing."""
    expected: str | None = None
    """A YAML file of the user's expected values, over the shipped table."""
    doctor: bool = True
    """The quick checks before the first probe (a failed one refuses the qualification naming the node)."""
    scheduler: str = "auto"
    """Whose command takes a node out of service: slurm, kubernetes, none, or auto (the driver's environment)."""
    drain: bool = False
    """Run that command for every node that does not pass (never for one that does)."""
    topology: str | None = None
    """The fabric's switch tree: Slurm's topology.conf or its YAML form (pairs judged inside and across leaves,
    a slow uplink named as the switch); None: inside a Slurm job, `scontrol show topology` where it has one;
    "none": no switch tree."""
    run_id: str | None = None
    """Name the qualification's run (default: a new time-stamped id); one the output holds already is refused
    (a qualification has no resume). A batch script that names it can find its driver (SIGUSR1)."""

    def __post_init__(self) -> None:
        if self.run_id is not None:
            check_run_id(self.run_id, "--run-id")
        if self.scheduler not in SCHEDULERS:
            raise UsageError(f"--scheduler {self.scheduler}: choose from {', '.join(SCHEDULERS)}")
        check_spec(self.sweep)
        check_threshold(self.threshold)
        check_min_fraction(self.min_fraction)


def qualify(options: QualifyOptions, *, voice: Voice = COMMAND_LINE, log: TextIO | None = None,
            placement_group=None) -> Qualification:
    """Qualify the cluster's nodes (or the sweep's `nodes`, or a caller's placement group's); a
    verdict per node with its evidence. `log`: where failed probes are printed (None: nowhere)."""
    entries = user_expected(options.expected)  # a bad file refused before the output is touched
    tree = switch_tree(options.topology, os.environ, voice)
    sched = draining_scheduler(options.scheduler, options.drain, os.environ)
    spec = dataclasses.replace(options.sweep, output=resolve_output(options.sweep.output))
    check_writable(spec.output)
    if options.run_id is not None and dataset.manifest(spec.output, options.run_id) is not None:
        raise UsageError(f"--run-id {options.run_id}: {spec.output} holds that run already (a qualification is not "
                         "resumed): name another")
    result = qualification(spec, threshold=options.threshold, min_fraction=options.min_fraction, seed=options.seed,
                           user_entries=entries, voice=voice, log=log, placement_group=placement_group,
                           doctor=options.doctor, switches=tree, run_id=options.run_id)
    return out_of_service(result, sched, options.drain) if result.judged else result


def draining_scheduler(name: str, drain: bool, environ: Mapping[str, str]) -> Scheduler:
    """`--scheduler NAME` (auto: from the environment), refused where `drain` has none to drain in."""
    sched = scheduler.chosen(name, environ)
    if drain and sched is Scheduler.NONE:
        raise UsageError("--drain: no scheduler to drain in (not inside a Slurm job or a Kubernetes pod); "
                         "name it with --scheduler slurm or --scheduler kubernetes")
    return sched


def out_of_service(result: Qualification, sched: Scheduler, drain: bool) -> Qualification:
    """Each node that did not pass with the command that takes it out of `sched`'s service (by its
    scheduler name, else its host name), run where `drain`; a passing node never gets one."""
    for v in result.failing:
        if sched is Scheduler.KUBERNETES and not v.name:
            continue  # its host name is the pod's, not a node's: nothing to cordon by (set COLLBENCH_NODE_NAME)
        name = v.name or (scheduler.slurm_name(v.host, v.node, os.environ) if sched is Scheduler.SLURM else None)
        act = scheduler.action(sched, name or v.host, v.verdict.value, v.detail, result.run_id)
        if act is not None:
            result.actions[v.node] = act
            if drain:
                result.drained[v.node] = scheduler.run(act)
    return result


def switch_tree(path: str | None, environ: Mapping[str, str], voice: Voice = COMMAND_LINE) -> Topology | None:
    """The switch tree qualify judges by: the file at `path` (refused where it does not parse), or
    `kubernetes:LABEL[,LABEL]`, the node labels kubectl reads;
    without one, inside a Slurm job, what `scontrol show topology` says where the site configured
    a tree (one that does not parse is said, and qualify goes on without it); "none": none."""
    if path == "none":
        return None
    if path and path.startswith(scheduler.KUBERNETES_TOPOLOGY):
        return scheduler.kubernetes_topology(path)
    if path:
        return topology.read(path)
    said = scheduler.slurm_topology(environ)
    try:
        return topology.parse_scontrol(said) if said else None
    except UsageError as e:
        voice.warn(f"collbench: warning: {e}; qualifying without a switch tree (--topology FILE gives one)")
        return None


def qualify_spec(base: SweepSpec | None = None, options: Mapping[str, Any] = NONE,
                 source: str = "collbench.api") -> SweepSpec:
    """The sweep a qualification measures (SWEEPS.spec: qualify's defaults without the caller's own
    sweep, never over it), checked for its one collective and element type."""
    return check_spec(SWEEPS.spec(base, options, source))


def check_spec(spec: SweepSpec) -> SweepSpec:
    """`spec`, refused unless it measures one collective and one element type: the verdicts
    compare like with like (`-d all` is every dtype the backend has)."""
    for name, values in (("--collective", spec.collectives), ("--dtype", spec.dtypes)):
        if len(values) != 1 or ALL in values:
            raise UsageError(f"{name} {','.join(values)}: qualify measures one (the verdicts compare like with like)")
    return spec
