"""`collbench compare BASELINE NEW`: busbw and time per matched row, drops flagged.

Exit 1 when any drop exceeds --threshold (a gate for driver or NCCL upgrades), 2 for unusable input.
"""

from __future__ import annotations

import argparse

from orchestrator.analysis.compare import KEY, compare
from orchestrator.commands.options import UNITS, add_analysis_options, check_threshold
from orchestrator.commands.render import render_tables
from orchestrator.errors import UsageError
from orchestrator.results import dataset


def add_parser(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="compare two runs row by row and flag busbw drops",
        description="Match rows of two runs by (collective, dtype, op, in_place, msg_bytes, topology, world_size, "
        "pattern); print the change of busbw and time; exit 1 when a drop exceeds --threshold. With the same "
        "PATH twice and no run ids, the two latest runs in it are compared.",
    )
    p.add_argument("baseline", help="results dataset of the baseline")
    p.add_argument("new", help="results dataset of the new run")
    p.add_argument("--baseline-run", metavar="RUN_ID", help="run in BASELINE (default: its latest)")
    p.add_argument("--new-run", metavar="RUN_ID", help="run in NEW (default: its latest)")
    add_analysis_options(p, threshold=0.05)
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    check_threshold(args.threshold)
    base_run, new_run = args.baseline_run, args.new_run
    if args.baseline == args.new and not base_run and not new_run:
        ids = dataset.runs(args.baseline)
        if len(ids) < 2:
            raise UsageError(f"{args.baseline}: holds {len(ids)} run(s); name two with --baseline-run/--new-run")
        base_run, new_run = ids[-2], ids[-1]
    base = dataset.load(args.baseline, base_run)
    new = dataset.load(args.new, new_run)
    matched, only_base, only_new = compare(base, new, args.threshold)
    scale = UNITS[args.unit]
    rows = [
        {**{k: r[k] for k in KEY}, f"busbw_base_{args.unit}": r.busbw_gbps_base * scale,
         f"busbw_new_{args.unit}": r.busbw_gbps_new * scale, "busbw_change": f"{r.busbw_change:+.1%}",
         "time_change": f"{r.time_change:+.1%}", "flag": "DROP" if r.flag else ""}
        for _, r in matched.iterrows()
    ]
    flagged = int(matched.flag.sum())
    summary = [{
        "baseline_run": base.run_id.iloc[0], "new_run": new.run_id.iloc[0], "matched": len(matched),
        "flagged_drops": flagged,
        "median_busbw_change": f"{matched.busbw_change.median():+.1%}" if len(matched) else "-",
        "worst_busbw_change": f"{matched.busbw_change.min():+.1%}" if len(matched) else "-",
        "only_in_baseline": len(only_base), "only_in_new": len(only_new),
    }]
    tables = [("summary", summary), (f"matched rows (drops beyond {args.threshold:.0%} flagged)", rows),
              ("rows only in the baseline", only_base.to_dict("records")),
              ("rows only in the new run", only_new.to_dict("records"))]
    print(render_tables(tables, args.format))
    return 1 if flagged else 0
