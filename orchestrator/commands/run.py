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
from orchestrator.sweep.spec import SweepSpec, check_backend_dtypes, from_mapping


def add_parser(sub) -> None:
    p = sub.add_parser(
        "run",
        help="run a sweep (starts an embedded Ray instance when no cluster is given)",
        description="Run collectives over message sizes on groups of ranks, check every result, "
        "print a table while it goes and write Parquet rows under --output.",
    )
    add_spec_options(p)
    p.add_argument("--resume", metavar="RUN_ID", help="finish run RUN_ID in --output: measure only the groups it lacks")
    p.set_defaults(handler=main)


def new_run_id(now: dt.datetime) -> str:
    return f"{now:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


def main(args: argparse.Namespace) -> int:
    t_start = time.monotonic()
    spec = spec_from_args(args)
    spec = dataclasses.replace(spec, output=resolve_output(spec.output))
    check_writable(spec.output)
    saved_nodes = None
    if args.resume:
        # The sweep is the run's own; where to write, whom to join and the exit policy are today's.
        saved, saved_nodes = _resumed_run(spec.output, args.resume)
        spec = dataclasses.replace(saved, output=spec.output, address=spec.address, allow_failures=spec.allow_failures)
    # Ray and everything that needs it are imported here, after the cheap checks.
    import ray

    from orchestrator.execution import connect, provenance
    from orchestrator.execution.pool import ActorPool, PlacementError
    from orchestrator.execution.probe import probe_nodes
    from orchestrator.execution.rows import RunRef
    from orchestrator.execution.runner import Runner
    from orchestrator.sweep import inventory
    from orchestrator.sweep.devices import FLOAT8, check_float8, check_memory
    from orchestrator.sweep.planner import check_plan, make_plan

    where = connect.connect(spec.address)
    try:
        inv = inventory.from_ray_nodes(ray.nodes(), spec.ranks_per_node)
        if not inv.nodes:
            raise UsageError("the Ray cluster has no node that can hold a rank")
        backend = spec.backend if spec.backend != "auto" else ("nccl" if inv.use_gpus else "gloo")
        if backend == "nccl" and not inv.use_gpus:
            raise UsageError("--backend nccl: the cluster has no GPU")
        check_backend_dtypes(backend, spec)
        if saved_nodes is not None and saved_nodes != [(n.node_id, n.ranks) for n in inv.nodes]:
            raise UsageError(
                f"--resume {args.resume}: the cluster's nodes changed since the run started, so its groups "
                "would not be the same; start a new run"
            )
        plan = make_plan(spec, inv)
        check_plan(spec, plan)
        probes = probe_nodes(inv, with_nccl=bool(FLOAT8 & set(spec.dtypes)))
        caps = {node_id: p.caps for node_id, p in probes.items() if p.caps is not None}
        platforms = {node_id: p.platform for node_id, p in probes.items()}
        check_float8(spec, backend, inv, caps)
        check_memory(spec, backend, inv, {len(g.ranks) for g in plan.groups}, caps)

        now = dt.datetime.now(dt.timezone.utc)
        run_id = args.resume or new_run_id(now)
        store = ResultStore(spec.output, run_id)
        skip = store.finished_groups() if args.resume else set()
        print(
            f"collbench: run {run_id} on {where}: {len(inv.nodes)} node(s), {inv.world_size} rank(s), "
            f"backend {backend}, {len(plan)} group(s) in {len(plan.rounds)} round(s); results -> {store.location}",
            flush=True,
        )
        if skip:
            print(f"collbench: resuming: {len(skip)} group(s) already on disk are skipped", flush=True)
        pool = ActorPool(inv, spec.env_vars(), start_timeout_s=min(spec.group_timeout_s, 300.0))
        pool.start()
        store.create()
        manifest = provenance.manifest(spec, inv, pool.infos(), backend, len(plan))
        manifest["gpu_driver"] = ",".join(sorted({c.driver_version for c in caps.values() if c.driver_version})) or None
        manifest.update(provenance.platforms(inv, platforms))
        manifest["started_at"] = now
        store.write_manifest(manifest)
        outcome = Outcome()
        observers = [outcome, console.Console(len(plan) - len(skip))]
        runner = Runner(spec, pool, store, backend, RunRef(run_id, now), observers,
                        {node_id: p.tags for node_id, p in platforms.items()})
        try:
            runner.run(plan, skip)
        except KeyboardInterrupt:
            manifest.update(state="interrupted", finished_at=dt.datetime.now(dt.timezone.utc))
            store.write_manifest(manifest)
            pool.shutdown()
            print(
                f"\ncollbench: interrupted; finished groups are saved in {store.location}. Resume with:\n"
                f"  collbench run --resume {run_id} --output {spec.output}",
                file=sys.stderr,
            )
            return 130
        pool.shutdown()
        store.compact()
        manifest.update(
            state="finished",
            finished_at=dt.datetime.now(dt.timezone.utc),
            groups_done=len(skip) + outcome.groups_ok + outcome.groups_failed + outcome.groups_skipped,
            device_models=sorted(set(manifest["device_models"]) | outcome.device_names),
            nccl_version=",".join(sorted(outcome.nccl_versions)) or manifest["nccl_version"],
        )
        store.write_manifest(manifest)
    except PlacementError as e:
        print(f"collbench: error: {e}", file=sys.stderr)
        return 1
    finally:
        connect.disconnect()
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
