"""`collbench watch`: keep a fleet qualified between jobs. Every cycle:

1. takes only idle capacity: a node whose GPUs (or, on CPUs, the CPUs its ranks ask for) another
   job holds is left out of the cycle and said so, never preempted; the cycle's workers ask Ray for
   what they use like any job and are released when it ends;
2. runs a short canary sweep (execution.jobs, like `run`) on the idle nodes, its rows under the
   output's `date=YYYY-MM-DD/` folder;
3. compares every link with its own rolling baseline, the last clean cycles of the same sweep
   (noise-aware, as `compare`), and reads the report's flags (peers, expected values, failures);
4. on a drift beyond noise, a flag or a failure, qualifies the suspects and a few good partners at
   once (operations.qualifying), and raises an alert per node it names, with the evidence; a node
   doubted in several of the recent cycles and cleared each time is alerted as intermittent;
5. says the cycle (a line, or one JSON object with --format jsonl), exports metrics
   (`ray_collbench_alerts_total{node,kind}`, the last cycle's duration and time, nodes checked and
   busy) and drops partitions older than the retention.

It survives what a long job meets: a node that leaves or joins (each cycle reads the cluster
anew), a cycle that hangs (the runner's deadlines), the Ray head restarting (it joins again within
--reconnect-timeout, or ends in one line), and SIGTERM or Ctrl-C (it ends after writing what it
has, exit 0). The loop is operations/watching.py; what a cycle decides, execution/canary.py."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType

from orchestrator.errors import UsageError
from orchestrator.execution.canary import Cycle
from orchestrator.execution.voice import Voice
from orchestrator.judging.defaults import MIN_FRACTION, PEER_THRESHOLD
from orchestrator.operations.checks import check_min_fraction, check_threshold, user_expected
from orchestrator.operations.qualify import SCHEDULERS, draining_scheduler, switch_tree
from orchestrator.operations.sweeps import Sweeps
from orchestrator.operations.watching import Watch
from orchestrator.results.location import check_writable, resolve_output
from orchestrator.scheduler import KUBERNETES_TOPOLOGY
from orchestrator.sweep.spec import SweepSpec
from orchestrator.sweep.units import parse_duration

__all__ = ["MAX_CYCLES", "MAX_DURATION_S", "SWEEPS", "Cycle", "WatchOptions", "watch"]


# What watch takes of a sweep, and its canary: all_reduce at two sizes, every node pair and every
# node's own group.
SWEEPS = Sweeps("collbench watch",
                fields=("collectives", "dtypes", "min_bytes", "max_bytes", "step_factor", "iters", "warmup",
                        "check_iters", "backend", "patterns", "ranks_per_node", "group_timeout_s", "deadline_rate_gbps",
                        "output", "address", "verbose", "env", "expect_net", "nodes", "exclude", "wait_nodes"),
                defaults=MappingProxyType({"collectives": ("all_reduce",), "min_bytes": 1 << 20,
                                           "max_bytes": 16 << 20, "step_factor": 16, "iters": 5, "warmup": 1,
                                           "patterns": ("pairwise", "intra"), "group_timeout_s": 60.0}))
MAX_CYCLES = 10**9
MAX_DURATION_S = 366 * 86400.0  # every, retention, reconnect timeout: past a year is a typo


@dataclass(frozen=True, kw_only=True)
class WatchOptions:
    """A watch's canary sweep and its loop, checked when made (the expected-values file is read
    when the watch starts)."""

    sweep: SweepSpec
    every: str | float = "5m"
    """Time from one cycle's start to the next (30s, 5m, 1h; a number is seconds)."""
    cycles: int = 0
    """Stop after this many cycles; 0: never (until SIGTERM or Ctrl-C)."""
    baseline_cycles: int = 5
    """A link's rolling baseline: the last N cycles that raised no alert."""
    retention: str | float | None = None
    """Drop date partitions older than this, in whole days (at least 1d); None: keep all."""
    reconnect_timeout: str | float = "5m"
    """How long to try joining the cluster again when its head stops answering."""
    threshold: float = PEER_THRESHOLD
    """A drop this fraction below its baseline, beyond the noise, is a drift."""
    expected: str | None = None
    """A YAML file of the user's expected values, over the shipped table."""
    min_fraction: float = MIN_FRACTION
    """With an expected value, a node below this fraction of it is slow."""
    doctor: bool = True
    fit_ranks: bool = False
    """CPU ranks fitted to the smallest node (no ranks per node given)."""
    scheduler: str = "auto"
    """Whose command takes a node an alert names out of service: slurm, kubernetes, none, or auto (the environment)."""
    drain: bool = False
    """Run that command, once per node, for every node a cycle's qualification names (never a switch)."""
    topology: str | None = None
    """The fabric's switch tree (Slurm's topology.conf or its YAML form; as qualify's): pairs judged inside and
    across leaves, a slow uplink alerted as the switch; None: inside a Slurm job, Slurm's own; "none": none."""

    def __post_init__(self) -> None:  # in the order the command checked them before (the file is read by watch())
        if self.scheduler not in SCHEDULERS:
            raise UsageError(f"--scheduler {self.scheduler}: choose from {', '.join(SCHEDULERS)}")
        check_threshold(self.threshold)
        check_min_fraction(self.min_fraction)
        _ = self.every_s, self.reconnect_s, self.retention_days
        for flag, value, low in (("--cycles", self.cycles, 0), ("--baseline-cycles", self.baseline_cycles, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_CYCLES:
                raise UsageError(f"{flag} {value}: must be between {low} and {MAX_CYCLES}")

    @property
    def every_s(self) -> float:
        return parse_duration(self.every, "--every", MAX_DURATION_S)

    @property
    def reconnect_s(self) -> float:
        return parse_duration(self.reconnect_timeout, "--reconnect-timeout", MAX_DURATION_S)

    @property
    def retention_days(self) -> int | None:
        if self.retention is None:
            return None
        days = int(parse_duration(self.retention, "--retention", MAX_DURATION_S) // 86400)
        if days < 1:  # partitions are days: a duration counts in whole ones
            raise UsageError(f"--retention {self.retention}: at least 1d (partitions are whole days)")
        return days


def watch(options: WatchOptions, *, emit: Callable[[Cycle], None], say: Callable[[str], None],
          live_line: bool = False) -> int:
    """Run the watch: each cycle to `emit`, its own lines to `say`, and on a terminal (`live_line`)
    each cycle's progress while it measures; 0 when it ended by --cycles or a signal, 1 when the
    cluster was lost for longer than the reconnect timeout."""
    user = user_expected(options.expected)
    voice = Voice(say, say)
    tree = switch_tree(options.topology, os.environ, voice)  # a bad file refused before the output
    sched = draining_scheduler(options.scheduler, options.drain, os.environ)
    spec = dataclasses.replace(options.sweep, output=resolve_output(options.sweep.output))
    check_writable(spec.output)
    return Watch(spec, every_s=options.every_s, cycles=options.cycles, threshold=options.threshold,
                 min_fraction=options.min_fraction, user_entries=user, baseline_cycles=options.baseline_cycles,
                 retention_days=options.retention_days, reconnect_s=options.reconnect_s, emit=emit, say=say,
                 doctor=options.doctor, fit_ranks=options.fit_ranks, switches=tree, sched=sched,
                 drain=options.drain, reread=(lambda: switch_tree(options.topology, os.environ, voice)) if (
                     options.topology or "").startswith(KUBERNETES_TOPOLOGY) else None, live_line=live_line).run()
