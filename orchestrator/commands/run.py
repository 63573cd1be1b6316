"""`collbench run`: measure a sweep on a Ray cluster and write Parquet."""

from __future__ import annotations

import argparse
import time

from orchestrator.commands.options import add_doctor_option, add_spec_options, given_fields, spec_from_args
from orchestrator.operations.run import RunOptions, check_run_id, run


def add_parser(sub) -> None:
    p = sub.add_parser(
        "run",
        help="run a sweep (starts an embedded Ray instance when no cluster is given)",
        description="Run collectives over message sizes on groups of ranks, check every result, "
        "print a table while it goes and write Parquet rows under --output.",
    )
    add_spec_options(p)
    p.add_argument("--resume", metavar="RUN_ID", help="finish run RUN_ID in --output: measure only the groups it lacks")
    p.add_argument("--run-id", metavar="ID",
                   help="name the run ID (default: a new time-stamped id); where --output holds a run of that id that "
                   "did not finish, it is resumed as --resume ID would, and one that finished is not measured again "
                   "(exit 0): a batch job requeued with --run-id slurm-$SLURM_JOB_ID resumes itself")
    p.add_argument("--retry-failed", action="store_true",
                   help="with --resume: also measure again the groups that failed, timed out or were skipped")
    add_doctor_option(p)
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    t_start = time.monotonic()
    if args.resume is not None:  # `--resume ''` is a bad id, not a new run; refused before --config is read
        check_run_id(args.resume)
    options = RunOptions(sweep=spec_from_args(args), resume=args.resume, retry_failed=args.retry_failed,
                         given=given_fields(args), doctor=not args.no_doctor, run_id=args.run_id)
    result = run(options, progress=True)
    if result.finished and result.message:  # --run-id of a run that finished: nothing measured
        print(result.message, flush=True)
    elif result.finished:
        for line in result.closing_lines(t_start):
            print(line, flush=True)
    return result.exit_code
