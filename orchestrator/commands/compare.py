"""`collbench compare BASELINE [NEW]`: busbw and time per matched link or shape, drops flagged
only beyond the run-to-run noise of their regime (latency- or bandwidth-bound): read from several
baseline runs of the same sweep when there are, else from the spread of the changes of the other
rows of the regime (where larger, the rows' own iterations), widened for a contended host; a row
with neither is not judged, and said so. The summary's verdict says dropped, unchanged or
inconclusive (only a prior to judge, or a host too busy), and why, on stderr too.

Exit 1 when a drop exceeds --threshold and its noise (a gate for driver or NCCL upgrades), 0 when
unchanged, 3 when inconclusive (0 with --accept-inconclusive), 2 for unusable input, including two
runs with no row in common. Never touches Ray or torch.
"""

from __future__ import annotations

import argparse
import json
import sys

from orchestrator.commands.options import add_analysis_options
from orchestrator.commands.render import on_screen, render_csv, render_tables
from orchestrator.errors import UsageError
from orchestrator.operations.checks import DROP_THRESHOLD
from orchestrator.operations.compare import CompareOptions, compare

TABLE_NAMES = ("summary", "matched", "only_in_baseline", "only_in_new")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="compare two runs link by link and flag busbw drops beyond run-to-run noise",
        description="Match rows of two runs by shape (collective, dtype, op, in_place, msg_bytes, topology, "
        "world_size, ranks_per_node, pattern) and by link (the group's node IPs and local ranks; --by shape pools "
        "a shape's groups); print the change of busbw and time and the noise floor, and exit 1 when a drop exceeds "
        "--threshold and the noise between runs of its regime (latency- or bandwidth-bound sizes): read from several "
        "baseline runs (every run of the baseline's sweep in BASELINE, or those named), else from how the regime's "
        "other rows moved, else from the rows' per-iteration times (the noise_source column says which), widened "
        "where a run's host was contended. With only a prior to judge, or a host too busy, the verdict is "
        "inconclusive (exit 3; 0 with --accept-inconclusive; unchanged exits 0). With one PATH (or the same PATH "
        "twice), runs of that folder are compared: --baseline-run A --new-run B, or without run ids its latest run "
        "with the runs before it.",
    )
    p.add_argument("baseline", nargs="?", default="results",
                   help="results dataset of the baseline (default: results, where run writes)")
    p.add_argument("new", nargs="?", default=None,
                   help="results dataset of the new run (default: BASELINE itself, to compare two of its runs)")
    p.add_argument("--baseline-run", metavar="RUN_ID[,RUN_ID...]",
                   help="baseline run(s) in BASELINE, comma-separated (default: its latest run, with every other run "
                   "of the same command and sweep in BASELINE; the new run itself excluded)")
    p.add_argument("--new-run", metavar="RUN_ID", help="run in NEW (default: its latest, not a baseline run)")
    p.add_argument("--by", choices=["link", "shape"], default="link",
                   help="match groups by their devices as well as their shape (link, default), or by shape only "
                   "(shape: two different clusters)")
    p.add_argument("--table", choices=TABLE_NAMES, metavar="NAME",
                   help="print only this table: " + ", ".join(TABLE_NAMES) + " (with --format csv: plain CSV)")
    p.add_argument("--accept-inconclusive", action="store_true",
                   help="exit 0, not 3, when the verdict is inconclusive (only a prior to judge, or a host too busy): "
                   "for a gate that should fail on a drop only")
    add_analysis_options(p, threshold=DROP_THRESHOLD)
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    options = CompareOptions(baseline=args.baseline, new=args.new, new_run=args.new_run, threshold=args.threshold,
                             by=args.by, baseline_runs=tuple(args.baseline_run.split(",")) if args.baseline_run
                             is not None else ())
    if args.format == "csv" and not args.table:
        raise UsageError("--format csv: name one table with --table NAME")
    found = compare(options)
    concluded = found.conclusion
    for note in found.picked:
        print(f"collbench: compare: {note}", file=sys.stderr)
    tables = {"summary": [found.summary(args.unit)], "matched": found.rows(args.unit),
              "only_in_baseline": found.only_in_baseline.to_dict("records"),
              "only_in_new": found.only_in_new.to_dict("records")}
    print(f"collbench: compare: {concluded.line}", file=sys.stderr)
    if args.table:
        tables = {args.table: tables[args.table]}
    if args.format == "json":
        print(json.dumps({"tables": tables}, indent=1, default=str))
    elif args.format == "csv":
        print(render_csv(tables[args.table]), end="")
    else:
        titles = {"summary": "summary", "matched": f"matched rows (busbw in {args.unit}; DROP: below -{args.threshold:.0%} "
                  "and beyond the noise floor, read from noise_source)", "only_in_baseline": "rows only in the baseline",
                  "only_in_new": "rows only in the new run"}
        print(render_tables([(titles[n], t) for n, t in tables.items()], args.format, **on_screen(sys.stdout)))
    if args.accept_inconclusive and found.inconclusive:
        return 0
    return found.exit_code
