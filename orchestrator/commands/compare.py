"""`collbench compare BASELINE NEW`: busbw and time per matched link or shape, drops flagged
only beyond the run-to-run noise measured from the rows' own iterations.

Exit 1 when a drop exceeds --threshold and its noise (a gate for driver or NCCL upgrades), 2 for
unusable input. Never touches Ray or torch.
"""

from __future__ import annotations

import argparse
import json

from orchestrator.analysis.compare import COLUMNS, SHAPE_KEY, compare
from orchestrator.commands.options import UNITS, add_analysis_options, check_threshold
from orchestrator.commands.render import render_csv, render_tables
from orchestrator.errors import UsageError
from orchestrator.results import dataset

TABLE_NAMES = ("summary", "matched", "only_in_baseline", "only_in_new")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="compare two runs link by link and flag busbw drops beyond noise",
        description="Match rows of two runs by shape (collective, dtype, op, in_place, msg_bytes, topology, "
        "world_size, ranks_per_node, pattern) and by link (the group's node IPs and local ranks; --by shape pools "
        "a shape's groups); print the change of busbw and time and the noise floor measured from the rows' "
        "per-iteration times; exit 1 when a drop exceeds --threshold and the noise. With the same PATH twice "
        "and no run ids, the two latest runs in it are compared.",
    )
    p.add_argument("baseline", help="results dataset of the baseline")
    p.add_argument("new", help="results dataset of the new run")
    p.add_argument("--baseline-run", metavar="RUN_ID", help="run in BASELINE (default: its latest)")
    p.add_argument("--new-run", metavar="RUN_ID", help="run in NEW (default: its latest)")
    p.add_argument("--by", choices=["link", "shape"], default="link",
                   help="match groups by their devices as well as their shape (link, default), or by shape only "
                   "(shape: two different clusters)")
    p.add_argument("--table", choices=TABLE_NAMES, metavar="NAME",
                   help="print only this table: " + ", ".join(TABLE_NAMES) + " (with --format csv: plain CSV)")
    add_analysis_options(p, threshold=0.05)
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    check_threshold(args.threshold)
    if args.format == "csv" and not args.table:
        raise UsageError("--format csv: name one table with --table NAME")
    base_run, new_run = args.baseline_run, args.new_run
    if args.baseline == args.new and not base_run and not new_run:
        ids = dataset.runs(args.baseline)
        if len(ids) < 2:
            raise UsageError(f"{args.baseline}: holds {len(ids)} run(s); name two with --baseline-run/--new-run")
        base_run, new_run = ids[-2], ids[-1]
    base = dataset.load_table(args.baseline, base_run, columns=COLUMNS)
    new = dataset.load_table(args.new, new_run, columns=COLUMNS)
    matched, only_base, only_new = compare(base, new, args.threshold, args.by)
    scale = UNITS[args.unit]
    key = SHAPE_KEY + (["link"] if args.by == "link" else [])
    rows = [
        {**{k: r[k] for k in key}, "busbw_base": r.busbw_gbps_base * scale, "busbw_new": r.busbw_gbps_new * scale,
         "busbw_change": r.busbw_change, "time_change": r.time_change, "noise_floor": r.noise_floor,
         "flag": "DROP" if r.flag else ""}
        for _, r in matched.iterrows()
    ]
    flagged = int(matched.flag.sum())
    summary = [{
        "baseline_run": base.column("run_id")[0].as_py(), "new_run": new.column("run_id")[0].as_py(),
        "by": args.by, "matched": len(matched), "flagged_drops": flagged, "unit": args.unit,
        "median_busbw_change": float(matched.busbw_change.median()) if len(matched) else None,
        "worst_busbw_change": float(matched.busbw_change.min()) if len(matched) else None,
        "only_in_baseline": len(only_base), "only_in_new": len(only_new),
    }]
    tables = {"summary": summary, "matched": rows, "only_in_baseline": only_base.to_dict("records"),
              "only_in_new": only_new.to_dict("records")}
    if args.table:
        tables = {args.table: tables[args.table]}
    if args.format == "json":
        print(json.dumps({"tables": tables}, indent=1, default=str))
    elif args.format == "csv":
        print(render_csv(tables[args.table]), end="")
    else:
        titles = {"summary": "summary", "matched": f"matched rows (busbw in {args.unit}; DROP: below -{args.threshold:.0%} "
                  "and beyond the noise floor)", "only_in_baseline": "rows only in the baseline",
                  "only_in_new": "rows only in the new run"}
        print(render_tables([(titles[n], t) for n, t in tables.items()], args.format))
    return 1 if flagged else 0
