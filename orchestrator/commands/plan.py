"""`collbench plan`: the rounds and groups a run would form, and what it would measure.

Creates no actor; works against the live cluster or a described inventory (`--inventory 64x8`).
"""

from __future__ import annotations

import argparse
from collections import Counter

from orchestrator.commands.options import add_spec_options, spec_from_args
from orchestrator.sweep.inventory import Inventory, from_description
from orchestrator.sweep.planner import Plan, build_cases, check_plan, make_plan
from orchestrator.sweep.spec import DOMAIN_PATTERNS, auto_backend, for_backend

# What plan reads: the groups (patterns, group sizes, concurrency), the cases counted per group
# (collectives, dtypes, ops, sizes), --root's check, and the live cluster (address, CPU ranks, and
# the backend, which decides the dtypes). Timing, output and worker options do not change a plan.
OPTIONS = ("collectives", "dtypes", "ops", "min_bytes", "max_bytes", "step_factor", "root", "backend", "patterns",
           "group_sizes", "concurrent", "ranks_per_node", "address")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "plan",
        help="print the rounds and groups a run would form, without creating actors",
        description="Print the rounds and groups a run with these options would form and the number of "
        "measurements, against the live cluster (--address, $RAY_ADDRESS) or a described inventory.",
    )
    add_spec_options(p, only=OPTIONS)
    p.add_argument("--inventory", metavar="NxR", help="plan for N nodes of R GPUs (64x8) or R CPU ranks (4x2cpu); "
                   "NxR/D: in NVLink domains of D nodes (36x4/18: two GB200 NVL72 racks)")
    p.add_argument("--groups", action="store_true", help="list the ranks of every group")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    spec = spec_from_args(args)
    inv = from_description(args.inventory) if args.inventory is not None else _live_inventory(spec)
    spec = for_backend(spec, auto_backend(spec.backend, inv.use_gpus))
    plan = make_plan(spec, inv)
    check_plan(spec, plan)
    per_size = {}
    measurements = 0
    for g in plan.groups:
        n = len(g.ranks)
        if n not in per_size:
            per_size[n] = sum(len(c.counts) for c in build_cases(spec, n))
        measurements += per_size[n]
    print(describe(plan, inv, args.groups))
    print(f"total: {len(plan)} groups in {len(plan.rounds)} rounds, {measurements} measurements")
    return 0


def describe(plan: Plan, inv: Inventory, list_groups: bool) -> str:
    domains = inv.domains()
    lines = [f"inventory: {len(inv.nodes)} node(s), {inv.world_size} rank(s) ({'GPU' if inv.use_gpus else 'CPU'})"
             + (f", {len(domains)} NVLink domain(s)" if domains else "")]
    for rnd in plan.rounds:
        sizes = Counter(len(g.ranks) for g in rnd)
        shape = ", ".join(f"{count} x {size} ranks" for size, count in sorted(sizes.items()))
        lines.append(f"round {rnd[0].round:>5}  {rnd[0].pattern:<9} {len(rnd):>6} group(s): {shape}")
        if list_groups:
            lines += [f"    {g.group_id}: ranks {','.join(map(str, g.ranks))}" for g in rnd]
    return "\n".join(lines)


def _live_inventory(spec) -> Inventory:
    import ray

    from orchestrator.execution import connect
    from orchestrator.sweep import inventory

    joined = connect.connect(spec.address)
    try:
        inv = inventory.select(inventory.from_ray_nodes(ray.nodes(), spec.ranks_per_node), spec.nodes, spec.exclude)
        if inv.use_gpus and set(spec.patterns) & set(DOMAIN_PATTERNS):  # only then: nvidia-smi -q on every node
            from orchestrator.execution import probe

            inv = inventory.with_domains(inv, probe.read_domains(inv))
        return inv
    finally:
        connect.disconnect(joined)
