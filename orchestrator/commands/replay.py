"""`collbench replay DUMPS...`: a training job's collectives, from its Flight Recorder dumps, run
again on the cluster (orchestrator.sweep.trace, execution.replaying); rows with pattern "replay"."""

from __future__ import annotations

import argparse
import time

from orchestrator.commands.options import add_doctor_option, add_spec_options, spec_from_args
from orchestrator.operations.replay import MAX_REPEAT, SWEEPS, ReplayOptions, replay


def add_parser(sub) -> None:
    p = sub.add_parser(
        "replay",
        help="run a training job's collectives again, from its PyTorch Flight Recorder dumps",
        description="Read the Flight Recorder dumps of a job (one per rank, as torch.distributed writes them with "
        "TORCH_FR_BUFFER_SIZE set: on a timeout, on torch._C._distributed_c10d._dump_fr_trace(), or to "
        "TORCH_FR_DUMP_TEMP_FILE<rank>), find its steps, and run the same collectives, sizes, dtypes and process "
        "groups on the cluster, each trace rank placed as the job placed it (--trace-ranks-per-node consecutive "
        "ranks per node). Rows go to --output with pattern replay and the step, the sequence number and the process "
        "group of each op; `collbench report` shows the time per step and each group's share, and "
        "`collbench predict --trace` prices the same ops from a sweep's fits.",
    )
    p.add_argument("dumps", nargs="+", metavar="DUMP",
                   help="dump files, or folders of them (file names end in the rank)")
    p.add_argument("--gaps", action="store_true",
                   help="issue each op at its traced time from its step's start (the job's pauses for compute), "
                   "instead of back to back (default: back to back)")
    p.add_argument("--repeat", type=int, default=3, help=f"replay the traced steps this many times, 1 to {MAX_REPEAT} "
                   "(default: 3)")
    p.add_argument("--ops-per-step", type=int, default=None, metavar="N",
                   help="ops of rank 0 per step (default: found from the trace: the repeating unit ended by pauses)")
    p.add_argument("--trace-ranks-per-node", type=int, default=None, metavar="N",
                   help="the traced job's layout, not this cluster's: how many ranks per node the job that wrote "
                   "the dumps ran, so trace ranks 0..N-1 were on its first node, N..2N-1 on its second, and so on; "
                   "they are placed so here (default: the ranks this cluster's nodes hold, the fewest of any node)")
    add_spec_options(p, only=SWEEPS.fields)
    add_doctor_option(p)
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    t_start = time.monotonic()
    options = ReplayOptions(dumps=tuple(args.dumps), sweep=spec_from_args(args), repeat=args.repeat, gaps=args.gaps,
                            ops_per_step=args.ops_per_step, trace_ranks_per_node=args.trace_ranks_per_node,
                            doctor=not args.no_doctor)
    result = replay(options, progress=True)
    if result.finished:
        for line in result.closing_lines(t_start):
            print(line, flush=True)
    return result.exit_code
