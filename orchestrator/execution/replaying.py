"""`collbench replay`'s plan: one group of every rank the trace had, each trace rank placed as the
job placed it (`trace_ranks_per_node` consecutive ranks per node: a tensor-parallel group of
consecutive ranks stays inside a node, data-parallel peers span nodes), and one case that replays
the traced steps on it (workloads.replay). Run through execution.jobs.sweep, so a replay is a run
as any other: manifest, deadlines, failures recorded, nothing lost on Ctrl-C."""

from __future__ import annotations

import math
from dataclasses import dataclass

from orchestrator.errors import UsageError
from orchestrator.sweep.inventory import Inventory
from orchestrator.sweep.planner import Group, Plan
from orchestrator.sweep.spec import SweepSpec
from workloads.messages import Case, ReplayProgram

PATTERN = "replay"


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

    def cases(self, group: Group) -> list[Case]:
        prog = self.program
        return [Case(PATTERN, "float32", "none", False, (), prog.repeat, prog.warmup_steps, 0, replay=prog)]
