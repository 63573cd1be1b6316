"""`collbench watch`: keep a fleet qualified between jobs (operations.watch). Runs until --cycles
have run (default: forever), SIGTERM or Ctrl-C (exit 0 after writing what it has); exit 1 when the
cluster is lost for longer than --reconnect-timeout, 2 for bad input."""

from __future__ import annotations

import argparse
import dataclasses

from orchestrator.commands.options import add_doctor_option, add_expected_options, add_spec_options, expected_from_args
from orchestrator.errors import UsageError
from orchestrator.judging.defaults import PEER_THRESHOLD
from orchestrator.operations.checks import check_threshold
from orchestrator.results.location import check_writable, resolve_output
from orchestrator.sweep.units import parse_duration

OPTIONS = ("collectives", "dtypes", "min_bytes", "max_bytes", "step_factor", "iters", "warmup", "check_iters",
           "backend", "patterns", "ranks_per_node", "group_timeout_s", "deadline_rate_gbps", "output", "address", "env",
           "expect_net", "nodes", "exclude")
# the canary: all_reduce at two sizes, every node pair and every node's own group
DEFAULTS = {"collectives": ("all_reduce",), "min_bytes": 1 << 20, "max_bytes": 16 << 20, "step_factor": 16,
            "iters": 5, "warmup": 1, "patterns": ("pairwise", "intra"), "group_timeout_s": 60.0}
MAX_CYCLES = 10**9
MAX_DURATION_S = 366 * 86400.0  # --every, --retention, --reconnect-timeout: past a year is a typo


def add_parser(sub) -> None:
    p = sub.add_parser(
        "watch",
        help="keep a fleet qualified between jobs: a short canary on idle nodes every few minutes, alerts",
        description="Every --every, on the nodes no other job holds (a busy node is skipped and said so, never "
        "preempted): a short canary sweep, every link compared with its own rolling baseline from earlier cycles "
        "(noise-aware, as compare) and with expected values; on a drift, a flag or a failure, a targeted qualify "
        "of the suspects and good partners, and an alert per node it names. Rows go to --output under "
        "date=YYYY-MM-DD/; metrics through Ray (ray_collbench_alerts_total). Ends on SIGTERM or Ctrl-C (exit 0), "
        "or after --cycles.",
    )
    add_spec_options(p, only=OPTIONS, defaults=DEFAULTS)
    p.add_argument("--every", default="5m", help="time from one cycle's start to the next: 30s, 5m, 1h; a bare number "
                   "is seconds (default: 5m)")
    p.add_argument("--cycles", type=int, default=0, help="stop after this many cycles (default: 0, never)")
    p.add_argument("--baseline-cycles", type=int, default=5,
                   help="a link's rolling baseline: the last N cycles that raised no alert (default: 5)")
    p.add_argument("--retention", default=None,
                   help="drop date=YYYY-MM-DD partitions older than this, counted in whole days (rounded down), at "
                   "least 1d: 30d, 720h (default: keep all)")
    p.add_argument("--reconnect-timeout", default="5m",
                   help="how long to try joining the cluster again when its head stops answering: 30s, 5m, 1h; a "
                   "bare number is seconds (default: 5m)")
    p.add_argument("--threshold", type=float, default=PEER_THRESHOLD,
                   help=f"a drop this fraction below its baseline, beyond the noise, is a drift (default: {PEER_THRESHOLD:g})")
    add_expected_options(p, "with an expected value, a node is slow")
    add_doctor_option(p)
    p.add_argument("--format", choices=("table", "jsonl"), default="table",
                   help="a line per cycle, or one JSON object per cycle: cycle, started_at, nodes_checked, "
                   "nodes_busy, alerts [node, kind, value, reference, message] (default: table)")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    from orchestrator.commands.options import spec_from_args
    from orchestrator.operations import watch

    check_threshold(args.threshold)
    user = expected_from_args(args)
    every_s = parse_duration(args.every, "--every", MAX_DURATION_S)
    reconnect_s = parse_duration(args.reconnect_timeout, "--reconnect-timeout", MAX_DURATION_S)
    retention = None
    if args.retention is not None:  # partitions are days: a duration counts in whole ones
        retention = int(parse_duration(args.retention, "--retention", MAX_DURATION_S) // 86400)
        if retention < 1:
            raise UsageError(f"--retention {args.retention}: at least 1d (partitions are whole days)")
    for flag, value, low in (("--cycles", args.cycles, 0), ("--baseline-cycles", args.baseline_cycles, 1)):
        if not low <= value <= MAX_CYCLES:
            raise UsageError(f"{flag} {value}: must be between {low} and {MAX_CYCLES}")
    spec = spec_from_args(args)
    spec = dataclasses.replace(spec, output=resolve_output(spec.output))
    check_writable(spec.output)
    emit = watch.stdout_jsonl if args.format == "jsonl" else watch.stdout_line
    return watch.Watch(spec, every_s=every_s, cycles=args.cycles, threshold=args.threshold,
                       min_fraction=args.min_fraction, user_entries=user, baseline_cycles=args.baseline_cycles,
                       retention_days=retention, reconnect_s=reconnect_s, emit=emit, say=watch.stderr,
                       doctor=not args.no_doctor, fit_ranks=args.ranks_per_node is None).run()
