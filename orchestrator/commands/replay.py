"""`collbench replay DUMPS...`: a training job's collectives, from its Flight Recorder dumps, run
again on the cluster (orchestrator.sweep.trace, execution.replaying); rows with pattern "replay"."""

from __future__ import annotations

import argparse
import dataclasses
import time

from orchestrator.commands.options import add_doctor_option, add_spec_options, spec_from_args
from orchestrator.errors import UsageError
from orchestrator.results.location import check_writable, resolve_output

OPTIONS = ("backend", "ranks_per_node", "nodes", "exclude", "group_timeout_s", "deadline_rate_gbps", "output",
           "address", "env", "allow_failures")
MAX_REPEAT = 1000


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
                   help="the job's ranks per node: trace ranks 0..N-1 on the first node, and so on (default: the "
                   "cluster's ranks per node)")
    add_spec_options(p, only=OPTIONS)
    add_doctor_option(p)
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    t_start = time.monotonic()
    if not 1 <= args.repeat <= MAX_REPEAT:
        raise UsageError(f"--repeat {args.repeat}: must be between 1 and {MAX_REPEAT}")
    if args.trace_ranks_per_node is not None and args.trace_ranks_per_node < 1:
        raise UsageError(f"--trace-ranks-per-node {args.trace_ranks_per_node}: must be at least 1")
    from orchestrator.sweep import trace

    loaded = trace.load(args.dumps)
    steps = trace.find_steps(loaded.ops[0], args.ops_per_step)
    program, notes = trace.program(loaded, steps, gaps=args.gaps)
    program = dataclasses.replace(program, repeat=args.repeat)
    spec = spec_from_args(args)
    spec = dataclasses.replace(spec, output=resolve_output(spec.output))
    check_writable(spec.output)
    print(f"collbench: trace of {loaded.world_size} rank(s), {len(loaded.groups)} process group(s): {steps.how}; "
          f"{sum(len(o) for o in program.ops)} op(s) per replay of {steps.count} step(s)", flush=True)
    for line in notes:
        print(f"collbench: {line}", flush=True)
    from orchestrator.execution import console, jobs
    from orchestrator.execution.replaying import ReplayPlanner

    result = jobs.sweep(spec, console_for=lambda groups: console.Console(groups), doctor=not args.no_doctor,
                        command="replay", planner=ReplayPlanner(program, args.trace_ranks_per_node))
    if result.state == "finished":
        for line in jobs.closing_lines(result, t_start):
            print(line, flush=True)
    return result.exit_code
