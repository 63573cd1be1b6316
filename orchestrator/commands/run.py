"""`collbench run`: measure a sweep on a Ray cluster and write Parquet."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import sys
import time
import uuid

from orchestrator import yamlfile
from orchestrator.commands import resume
from orchestrator.commands.options import add_spec_options, spec_from_args
from orchestrator.errors import UsageError
from orchestrator.execution import console
from orchestrator.execution.outcome import Outcome
from orchestrator.results.location import check_writable, resolve_output
from orchestrator.results.store import ResultStore
from orchestrator.sweep.spec import SweepSpec


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
    p.set_defaults(handler=main)


def new_run_id(now: dt.datetime) -> str:
    return f"{now:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


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
        spec = resume.resumed_spec(saved, spec, resume.given_fields(args, _config_keys(args)), args.resume)
    check_writable(spec.output)
    # Ray and everything that needs it are imported here, after the cheap checks.
    from orchestrator.execution.pool import PlacementError
    from orchestrator.execution.session import Session, exit_code, is_disk_full, print_late_interrupt
    from orchestrator.sweep.planner import check_plan, make_plan

    now = dt.datetime.now(dt.timezone.utc)
    run_id = args.resume if resuming else new_run_id(now)
    resume_with = resume.resume_command(run_id, spec.output, spec.address)
    session = None
    try:
        with Session(spec, run_id, now) as session:
            inv, backend = session.cluster()
            change = resume.cluster_change(saved.nodes, inv) if saved else None
            if change:
                raise UsageError(f"--resume {run_id}: the cluster is not the one the run started on ({change}), "
                                 "so its groups would not be the same; start a new run")
            spec = session.spec  # as the backend runs it (`-d all` expanded)
            plan = make_plan(spec, inv)
            check_plan(spec, plan)
            session.check_devices({len(g.ranks) for g in plan.groups})
            store = session.store
            skip = store.finished_groups(args.retry_failed) if resuming else set()
            print(
                f"collbench: run {run_id} on {session.where}: {len(inv.nodes)} node(s), {inv.world_size} rank(s), "
                f"backend {backend}, {len(plan)} group(s) in {len(plan.rounds)} round(s); results -> {store.location}",
                flush=True,
            )
            if resuming:
                again = " (failed, timed-out and skipped ones are measured again)" if args.retry_failed else ""
                print(f"collbench: resuming: {len(skip)} group(s) already on disk are skipped{again}", flush=True)
            runner, outcome = session.start(len(plan), [console.Console(len(plan) - len(skip))], skipped=len(skip))
            try:
                runner.run(plan, skip)
                session.finish(outcome)
            except KeyboardInterrupt as e:  # while measuring, or while compacting the rows
                session.interrupted()
                print(f"\ncollbench: interrupted; finished groups are saved in {store.location}. Resume with:\n"
                      f"  {resume_with}", file=sys.stderr, flush=True)
                return exit_code(e)
    except OSError as e:  # a full disk, where the workers were started, measured or released
        if session is None or not is_disk_full(e):
            raise
        said = session.stopped_by_full_disk(e)
        resume_hint = f"; resume once there is room: {resume_with}" if session.manifest else ""
        print(f"collbench: error: {said}{resume_hint}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt as e:  # before the workers started, or while they were being released
        print_late_interrupt(session, "group")
        return exit_code(e)
    except PlacementError as e:
        print(f"collbench: error: {e}", file=sys.stderr)
        return 1
    return _report_end(spec, store, outcome, t_start, session.startup.line())


def _report_end(spec: SweepSpec, store: ResultStore, outcome: Outcome, t_start: float, startup: str) -> int:
    wall = time.monotonic() - t_start
    first = f"{outcome.first_row_at - t_start:.1f}s" if outcome.first_row_at else "-"
    print(
        f"collbench: wall {wall:.1f}s, measuring {outcome.measured_s:.1f}s ({outcome.measured_s / wall:.0%}), "
        f"first row after {first}, {startup}, group set-up median {_median(outcome.setup_s):.2f}s, "
        f"tear-down median {_median(outcome.teardown_s):.2f}s",
        flush=True,
    )
    print(
        f"collbench: {outcome.rows} row(s) in {outcome.groups_ok} ok, {outcome.groups_failed} failed and "
        f"{outcome.groups_skipped} skipped group(s) written to {store.run_dir}",
        flush=True,
    )
    code = 0
    if outcome.failures:
        print("collbench: failures:", file=sys.stderr)
        for line in console.failure_summary(outcome.failures):
            print("  " + line, file=sys.stderr)
        if not spec.allow_failures:
            code = 1
    if outcome.n_wrong:
        print(f"collbench: {outcome.n_wrong} wrong element(s) in the checks", file=sys.stderr)
        code = 1
    return code


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2] if values else 0.0


def _resumed_run(output: str, run_id: str) -> resume.SavedRun:
    """The run's own sweep and nodes, from its manifest."""
    from orchestrator.results import dataset

    record = dataset.manifest(output, run_id)
    if record is None:
        raise UsageError(f"--resume {run_id}: no such run in {output}")
    return resume.saved_run(record, run_id)


def _config_keys(args: argparse.Namespace) -> set[str]:
    """The sweep keys of --config (already read and checked by spec_from_args)."""
    if not args.config:
        return set()
    data = yamlfile.read(args.config, "--config")
    return set(data) if isinstance(data, dict) else set()
