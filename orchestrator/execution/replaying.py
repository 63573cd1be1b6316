"""`collbench replay`'s plan: one group of every rank the trace had, each trace rank placed as the
job placed it (`trace_ranks_per_node` consecutive ranks per node: a tensor-parallel group of
consecutive ranks stays inside a node, data-parallel peers span nodes), and one case that replays
the traced steps on it (workloads.replay). Run through execution.jobs.sweep, so a replay is a run
as any other: manifest, deadlines, failures recorded, nothing lost on Ctrl-C."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from orchestrator.errors import UsageError
from orchestrator.sweep import trace
from orchestrator.sweep.inventory import Inventory
from orchestrator.sweep.planner import Group, Plan
from orchestrator.sweep.spec import SweepSpec
from workloads import registry
from workloads.messages import Case, ReplayProgram

PATTERN = "replay"
MAX_REPEAT = 1000


def from_dumps(dumps, *, repeat: int = 3, gaps: bool = False, ops_per_step: int | None = None,
               trace_ranks_per_node: int | None = None) -> tuple[ReplayPlanner, list[str]]:
    """The planner that replays the Flight Recorder dumps `dumps` (files or folders), and the lines
    that say what was found: the trace, its steps, what is left out. Raises UsageError (bad input,
    checked before anything runs)."""
    if not 1 <= repeat <= MAX_REPEAT:
        raise UsageError(f"--repeat {repeat}: must be between 1 and {MAX_REPEAT}")
    if trace_ranks_per_node is not None and trace_ranks_per_node < 1:
        raise UsageError(f"--trace-ranks-per-node {trace_ranks_per_node}: must be at least 1")
    loaded = trace.load(list(dumps))
    steps = trace.find_steps(loaded.ops[0], ops_per_step)
    program, notes = trace.program(loaded, steps, gaps=gaps)
    program = dataclasses.replace(program, repeat=repeat)
    said = [f"trace of {loaded.world_size} rank(s), {len(loaded.groups)} process group(s): {steps.how}; "
            f"{sum(len(o) for o in program.ops)} op(s) per replay of {steps.count} step(s)", *notes]
    return ReplayPlanner(program, trace_ranks_per_node), said


@dataclass(frozen=True)
class ReplayPlanner:
    program: ReplayProgram
    trace_ranks_per_node: int | None = None  # None: as many as the cluster's nodes hold

    def placement(self, inv: Inventory) -> tuple[int, ...]:
        """The cluster rank of each trace rank."""
        world = self.program.world_size
        per_node = self.trace_ranks_per_node or min(n.ranks for n in inv.nodes)
        need = math.ceil(world / per_node)
        if need > len(inv.nodes):
            raise UsageError(f"the trace has {world} rank(s), {per_node} per node: it needs {need} node(s), "
                             f"the cluster has {len(inv.nodes)} (--trace-ranks-per-node places fewer per node)")
        small = [n for n in inv.nodes[:need] if n.ranks < per_node]
        if small:
            raise UsageError(f"--trace-ranks-per-node {per_node}: node {small[0].ip} holds {small[0].ranks} rank(s)"
                             + ("" if inv.use_gpus else " (--ranks-per-node sets a CPU node's)"))
        first = inv.first_rank()
        return tuple(first[r // per_node] + r % per_node for r in range(world))

    def plan(self, spec: SweepSpec, inv: Inventory) -> Plan:
        return Plan(((Group("r0-g0", PATTERN, 0, self.placement(inv)),),))

    def expected_s(self) -> float | None:
        """How long the replay takes at the job's own times, where the trace has every op's (NCCL
        with TORCH_NCCL_ENABLE_TIMING): its slowest rank's traced steps (with --gaps, each as long
        as its last op ends after the step's start), each time they are replayed (warm-up
        included); None where it does not."""
        prog = self.program
        if not any(prog.ops) or any(op.traced_us is None for ops in prog.ops for op in ops):
            return None
        per_rank = []
        for ops in prog.ops:  # back to back, each op's own time; --gaps: each step as long as its last op ends
            steps: dict[int, float] = {}
            for op in ops:
                end = op.offset_us + op.traced_us if prog.gaps else steps.get(op.step, 0.0) + op.traced_us
                steps[op.step] = max(steps.get(op.step, 0.0), end)
            per_rank.append(sum(steps.values()))
        return max(per_rank) / 1e6 * (prog.warmup_steps + prog.repeat)

    def cases(self, group: Group) -> list[Case]:
        prog = self.program
        return [Case(registry.REPLAY, "float32", "none", False, (), prog.repeat, prog.warmup_steps, 0, replay=prog)]
