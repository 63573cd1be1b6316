"""`collbench run`: measure a sweep on a Ray cluster and write Parquet."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import sys
import time
import uuid

from orchestrator.commands.options import add_spec_options, spec_from_args
from orchestrator.errors import UsageError
from orchestrator.execution import console
from orchestrator.execution.outcome import Outcome
from orchestrator.results.store import ResultStore, check_writable, resolve_output
from orchestrator.sweep.spec import SweepSpec, from_mapping


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
    spec = spec_from_args(args)
    spec = dataclasses.replace(spec, output=resolve_output(spec.output))
    if args.retry_failed and not args.resume:
        raise UsageError("--retry-failed: only with --resume RUN_ID")
    check_writable(spec.output)
    saved_nodes = None
    if args.resume:
        # The sweep is the run's own; where to write, whom to join and the exit policy are today's.
        saved, saved_nodes = _resumed_run(spec.output, args.resume)
        spec = dataclasses.replace(saved, output=spec.output, address=spec.address, allow_failures=spec.allow_failures)
    # Ray and everything that needs it are imported here, after the cheap checks.
    from orchestrator.execution.pool import PlacementError
    from orchestrator.execution.session import Session, exit_code, print_late_interrupt
    from orchestrator.sweep.planner import check_plan, make_plan

    now = dt.datetime.now(dt.timezone.utc)
    run_id = args.resume or new_run_id(now)
    session = None
    try:
        with Session(spec, run_id, now) as session:
            inv, backend = session.cluster(saved_nodes, args.resume)
            spec = session.spec  # as the backend runs it (`-d all` expanded)
            plan = make_plan(spec, inv)
            check_plan(spec, plan)
            session.check_devices({len(g.ranks) for g in plan.groups})
            store = session.store
            skip = store.finished_groups(args.retry_failed) if args.resume else set()
            print(
                f"collbench: run {run_id} on {session.where}: {len(inv.nodes)} node(s), {inv.world_size} rank(s), "
                f"backend {backend}, {len(plan)} group(s) in {len(plan.rounds)} round(s); results -> {store.location}",
                flush=True,
            )
            if args.resume:
                again = " (failed, timed-out and skipped ones are measured again)" if args.retry_failed else ""
                print(f"collbench: resuming: {len(skip)} group(s) already on disk are skipped{again}", flush=True)
            runner, outcome = session.start(len(plan), [console.Console(len(plan) - len(skip))], skipped=len(skip))
            try:
                runner.run(plan, skip)
                session.finish(outcome, len(skip))
            except KeyboardInterrupt as e:  # while measuring, or while compacting the rows
                session.interrupted()
                print(
                    f"\ncollbench: interrupted; finished groups are saved in {store.location}. Resume with:\n"
                    f"  collbench run --resume {run_id} --output {spec.output}",
                    file=sys.stderr, flush=True,
                )
                return exit_code(e)
    except KeyboardInterrupt as e:  # before the workers started, or while they were being released
        print_late_interrupt(session, "group")
        return exit_code(e)
    except PlacementError as e:
        print(f"collbench: error: {e}", file=sys.stderr)
        return 1
    return _report_end(spec, store, outcome, t_start)


def _report_end(spec: SweepSpec, store: ResultStore, outcome: Outcome, t_start: float) -> int:
    wall = time.monotonic() - t_start
    first = f"{outcome.first_row_at - t_start:.1f}s" if outcome.first_row_at else "-"
    print(
        f"collbench: wall {wall:.1f}s, measuring {outcome.measured_s:.1f}s ({outcome.measured_s / wall:.0%}), "
        f"first row after {first}, group set-up median {_median(outcome.setup_s):.2f}s, "
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


def _resumed_run(output: str, run_id: str) -> tuple[SweepSpec, list[tuple[str, int]]]:
    """The spec a run was started with and its nodes (id, ranks), from its manifest."""
    from orchestrator.results import dataset

    record = dataset.manifest(output, run_id)
    if record is None:
        raise UsageError(f"--resume {run_id}: no such run in {output}")
    saved = json.loads(record["spec"])
    nodes = [(n["node_id"], n["ranks"]) for n in json.loads(record["inventory"])]
    return SweepSpec(**from_mapping(saved, source=f"--resume {run_id}")), nodes
