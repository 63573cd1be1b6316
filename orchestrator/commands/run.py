"""`collbench run`: measure a sweep on a Ray cluster and write Parquet."""

from __future__ import annotations

import argparse
import time

from orchestrator import yamlfile
from orchestrator.commands.options import add_doctor_option, add_spec_options, spec_from_args
from orchestrator.operations.run import RunOptions, run
from orchestrator.results.schema import RunState
from orchestrator.sweep import resume
from orchestrator.sweep.spec import field_of, spec_fields


def add_parser(sub) -> None:
    p = sub.add_parser(
        "run",
        help="run a sweep (starts an embedded Ray instance when no cluster is given)",
        description="Run collectives over message sizes on groups of ranks, check every result, "
        "print a table while it goes and write Parquet rows under --output.",
    )
    add_spec_options(p)
    p.add_argument("--resume", metavar="RUN_ID", help="finish run RUN_ID in --output: measure only the groups it lacks")
    p.add_argument("--retry-failed", action="store_true",
                   help="with --resume: also measure again the groups that failed, timed out or were skipped")
    add_doctor_option(p)
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    t_start = time.monotonic()
    if args.resume is not None:  # `--resume ''` is a bad id, not a new run; refused before --config is read
        resume.check_run_id(args.resume)
    options = RunOptions(sweep=spec_from_args(args), resume=args.resume, retry_failed=args.retry_failed,
                         given=frozenset(_given_fields(args)), doctor=not args.no_doctor)
    from orchestrator.execution import console, jobs

    result = run(options, console_for=lambda groups: console.Console(groups))
    if result.state == RunState.FINISHED:
        for line in jobs.closing_lines(result, t_start):
            print(line, flush=True)
    return result.exit_code


def _given_fields(args: argparse.Namespace) -> set[str]:
    """The sweep options the user gave: on the command line (parsed as None when absent) or in --config."""
    return {f.name for f in spec_fields() if getattr(args, f.name, None) is not None} | _config_keys(args)


def _config_keys(args: argparse.Namespace) -> set[str]:
    """The sweep fields that --config's keys name (the file already read and checked by spec_from_args)."""
    if not args.config:
        return set()
    data = yamlfile.read(args.config, "--config")
    return {field_of(key).name for key in data} if isinstance(data, dict) else set()
