"""`collbench plan`: the rounds and groups a run would form, and what it would measure.

Creates no actor; works against the live cluster or a described inventory (`--inventory 64x8`).
"""

from __future__ import annotations

import argparse
from collections import Counter

from orchestrator.commands.options import add_spec_options, spec_from_args
from orchestrator.operations.plan import SWEEPS, Planned, PlanOptions, plan


def add_parser(sub) -> None:
    p = sub.add_parser(
        "plan",
        help="print the rounds and groups a run would form, without creating actors",
        description="Print the rounds and groups a run with these options would form, the number of "
        "measurements and an estimate of how long it would take, against the live cluster (--address, "
        "$RAY_ADDRESS) or a described inventory. The estimate takes its rates from the latest finished run "
        "in --output on the same nodes, else from stated defaults, and says which.",
    )
    add_spec_options(p, only=SWEEPS.fields)
    p.add_argument("--inventory", metavar="NxR", help="plan for N nodes of R GPUs (64x8) or R CPU ranks (4x2cpu); "
                   "NxR/D: in NVLink domains of D nodes (36x4/18: two GB200 NVL72 racks)")
    p.add_argument("--groups", action="store_true", help="list the ranks of every group")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    planned = plan(PlanOptions(sweep=spec_from_args(args), inventory=args.inventory))
    print(describe(planned, args.groups))
    print(f"total: {len(planned.plan)} groups in {len(planned.plan.rounds)} rounds, {planned.measurements} "
          "measurements")
    print(planned.estimate.line())
    return 0


def describe(planned: Planned, list_groups: bool) -> str:
    plan, inv = planned.plan, planned.inventory
    domains = inv.domains()
    lines = [f"inventory: {len(inv.nodes)} node(s), {inv.world_size} rank(s) ({'GPU' if inv.use_gpus else 'CPU'})"
             + (f", {len(domains)} NVLink domain(s)" if domains else "")]
    runs: list[list] = []  # consecutive rounds alike (pattern, groups and their sizes) said once
    for rnd in plan.rounds:
        sizes = Counter(len(g.ranks) for g in rnd)
        shape = ", ".join(f"{count} x {size} ranks" for size, count in sorted(sizes.items()))
        said = f"{rnd[0].pattern:<9} {len(rnd):>6} group(s): {shape}"
        if runs and runs[-1][2] == said and not list_groups:
            runs[-1][1] = rnd[0].round
        else:
            runs.append([rnd[0].round, rnd[0].round, said])
        if list_groups:
            lines += [f"round {rnd[0].round:>5}  {said}",
                      *(f"    {g.group_id}: ranks {','.join(map(str, g.ranks))}" for g in rnd)]
    if not list_groups:
        labels = [f"round {first}" if first == last else f"rounds {first}-{last}" for first, last, _ in runs]
        width = max(map(len, labels), default=0) + 2
        lines += [f"{label:<{width}}{said}" for label, (_, _, said) in zip(labels, runs)]
    return "\n".join(lines)
