"""`collbench run`: measure a sweep on a Ray cluster and write Parquet."""

from __future__ import annotations

import argparse
import dataclasses
import time

from orchestrator import yamlfile
from orchestrator.commands.options import add_doctor_option, add_spec_options, spec_from_args
from orchestrator.errors import UsageError
from orchestrator.results.location import check_writable, resolve_output
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
    resuming = args.resume is not None  # `--resume ''` is a bad id, not a new run
    if resuming:
        resume.check_run_id(args.resume)  # before anything reads or writes a path made from it
    spec = spec_from_args(args)
    spec = dataclasses.replace(spec, output=resolve_output(spec.output))
    if args.retry_failed and not resuming:
        raise UsageError("--retry-failed: only with --resume RUN_ID")
    saved = None
    if resuming:
        saved = _resumed_run(spec.output, args.resume)
        spec = resume.resumed_spec(saved, spec, _given_fields(args), args.resume)
    check_writable(spec.output)
    # Ray and everything that needs it are imported here, after the cheap checks.
    from orchestrator.execution import console, jobs

    result = jobs.sweep(spec, run_id=args.resume, saved=saved, retry_failed=args.retry_failed,
                        console_for=lambda groups: console.Console(groups), doctor=not args.no_doctor)
    if result.state == RunState.FINISHED:
        for line in jobs.closing_lines(result, t_start):
            print(line, flush=True)
    return result.exit_code


def _resumed_run(output: str, run_id: str) -> resume.SavedRun:
    """The run's own sweep and nodes, from its manifest."""
    from orchestrator.results import dataset

    record = dataset.manifest(output, run_id)
    if record is None:
        raise UsageError(f"--resume {run_id}: no such run in {output}")
    if record.get("command") == "replay":
        raise UsageError(f"--resume {run_id}: a replay (one group of every traced rank) is not resumed; "
                         "run `collbench replay` again")
    return resume.saved_run(record, run_id)


def _given_fields(args: argparse.Namespace) -> set[str]:
    """The sweep options the user gave: on the command line (parsed as None when absent) or in --config."""
    return {f.name for f in spec_fields() if getattr(args, f.name, None) is not None} | _config_keys(args)


def _config_keys(args: argparse.Namespace) -> set[str]:
    """The sweep fields that --config's keys name (the file already read and checked by spec_from_args)."""
    if not args.config:
        return set()
    data = yamlfile.read(args.config, "--config")
    return {field_of(key).name for key in data} if isinstance(data, dict) else set()
