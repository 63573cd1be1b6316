"""`collbench watch`: keep a fleet qualified between jobs (operations.watch). Runs until --cycles
have run (default: forever), SIGTERM or Ctrl-C (exit 0 after writing what it has); exit 1 when the
cluster is lost for longer than --reconnect-timeout, 2 for bad input."""

from __future__ import annotations

import argparse
import json
import sys

from orchestrator.commands.options import (
    add_doctor_option,
    add_expected_options,
    add_scheduler_options,
    add_spec_options,
)
from orchestrator.operations.checks import PEER_THRESHOLD
from orchestrator.operations.watch import SWEEPS, Cycle, WatchOptions, watch


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
    add_spec_options(p, only=SWEEPS.fields, defaults=SWEEPS.defaults)
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
    add_scheduler_options(p, "a cycle's qualification names (slow, intermittent, hang, failed, lost; once per node "
                          "per watch)")
    p.add_argument("--topology", metavar="FILE",
                   help="the fabric's switch tree, as qualify takes it: Slurm's topology.conf or its YAML form. Each "
                   "cycle's pairs are judged inside and across leaves apart; a leaf whose pairs across are slow "
                   "while those inside are not is one slow_uplink alert naming the switch, and its nodes are not "
                   "suspects for it (never drained for it). A node the file does not list when the watch starts is "
                   "refused (exit 2); one that joins later is judged without a leaf. kubernetes:LEAF_LABEL[,SPINE_LABEL]: "
                   "the nodes' labels, read with kubectl, as qualify reads them. Default: inside a Slurm job, "
                   "`scontrol show topology` where the site has a tree; none outside one ('none': no tree)")
    add_doctor_option(p)
    p.add_argument("--format", choices=("table", "jsonl"), default="table",
                   help="a line per cycle, or one JSON object per cycle: cycle, started_at, nodes_checked, "
                   "nodes_busy, alerts [node, kind, value, reference, message, action, drained] (default: table)")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    from orchestrator.commands.options import spec_from_args

    options = WatchOptions(sweep=spec_from_args(args), every=args.every, cycles=args.cycles,
                           baseline_cycles=args.baseline_cycles, retention=args.retention,
                           reconnect_timeout=args.reconnect_timeout, threshold=args.threshold, expected=args.expected,
                           min_fraction=args.min_fraction, doctor=not args.no_doctor,
                           fit_ranks=args.ranks_per_node is None, scheduler=args.scheduler, drain=args.drain,
                           topology=args.topology)
    return watch(options, emit=_jsonl if args.format == "jsonl" else _line, say=_stderr, live_line=True)


def _jsonl(cycle: Cycle) -> None:
    print(json.dumps(cycle.to_json()), flush=True)


def _line(cycle: Cycle) -> None:
    print(cycle.line(), flush=True)


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
