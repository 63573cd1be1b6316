"""`collbench qualify`: name the slow, hanging, failing and lost nodes of a cluster in a few rounds.

`sweep.qualify.Qualifier` decides each round's probes (groups of whole nodes); each round runs on
Ray as a sweep's round does, its rows (with their `phase`) go to the same dataset as a run's, and
what each probe reached goes back to the qualifier. Exit 0 when every node passes, 1 when a
culprit is named, 2 for bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import statistics
import sys
import time

from orchestrator.commands.options import add_expected_options, add_spec_options, check_threshold, expected_from_args
from orchestrator.commands.render import render_tables
from orchestrator.errors import UsageError
from orchestrator.execution.events import GroupEnded, GroupFailure, GroupStarted, RunObserver
from orchestrator.results.location import check_writable, resolve_output
from orchestrator.sweep.inventory import Inventory
from orchestrator.sweep.qualify import ALL_PAIRS_NODES, Deadlines, Outcome, Probe, Qualifier, Reference, Result
from orchestrator.sweep.sizes import format_bytes
from orchestrator.sweep.spec import ALL, SweepSpec
from workloads.dtypes import ELEMENT_BYTES
from workloads.messages import Status
from workloads.registry import COLLECTIVES

OPTIONS = ("collectives", "dtypes", "min_bytes", "max_bytes", "step_factor", "iters", "warmup", "check_iters",
           "backend", "ranks_per_node", "group_timeout_s", "deadline_rate_gbps", "output", "address", "env",
           "expect_net")
DEFAULTS = {"collectives": ("all_reduce",), "min_bytes": 1 << 20, "max_bytes": 16 << 20, "iters": 5, "warmup": 1,
            "group_timeout_s": 60.0}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "qualify",
        help="name the slow, hanging, failing and lost nodes in a few rounds (not one per node pair)",
        description="Probe the cluster's nodes in rounds: every node alone, a random pairing, retests of "
        "suspects with partners that passed, then all nodes at once, bisected when slow or hung. Each node "
        "gets a verdict (pass, slow, hang, failed, lost) with its evidence; the probes' rows go to --output "
        "with a `phase` column. A probe is slow below --min-fraction of the expected busbw where one applies "
        "(README: Expected values), else --threshold below the median of its round. Exit 0 when every node "
        "passes, 1 when one does not, 2 for bad input.",
    )
    add_spec_options(p, only=OPTIONS, defaults=DEFAULTS, helps={
        "collectives": "the one collective to probe with: " + ",".join(COLLECTIVES),
        "dtypes": "the one element type to probe with: " + ",".join(ELEMENT_BYTES) + " (not all)"})
    p.add_argument("--threshold", type=float, default=0.10,
                   help="without an expected value, a probe this fraction below its round's median is slow "
                   "(gates: twice it) (default: 0.1)")
    add_expected_options(p, "with an expected value, a probe is slow")
    p.add_argument("--format", choices=("table", "json"), default="table",
                   help="verdicts as a table, or as JSON with fields node, verdict, evidence (default: table)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random pairing (default: 0)")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    t_start = time.monotonic()
    check_threshold(args.threshold)
    user = expected_from_args(args)
    spec = spec_from_qualify_args(args)
    check_writable(spec.output)
    from orchestrator.analysis import report
    from orchestrator.commands.run import new_run_id
    from orchestrator.execution import console
    from orchestrator.execution.pool import PlacementError
    from orchestrator.execution.session import Session, exit_code, print_late_interrupt
    from orchestrator.sweep.planner import Group, Plan

    now = dt.datetime.now(dt.timezone.utc)
    run_id = new_run_id(now)
    log = sys.stderr if args.format == "json" else sys.stdout  # stdout: the JSON alone
    session = None
    try:
        with Session(spec, run_id, now) as session:
            inv, backend = session.cluster()
            rpn = max(n.ranks for n in inv.nodes)
            if len(inv.nodes) < 2 and rpn < 2:
                raise UsageError("qualify needs two nodes, or nodes with more than one rank (--ranks-per-node)")
            session.check_devices({rpn, 2 * rpn, inv.world_size})
            q = Qualifier(len(inv.nodes), rpn, args.threshold, seed=args.seed, min_fraction=args.min_fraction)
            collector = _Collector(q, inv, Deadlines(spec.group_timeout_s))
            runner, outcome = session.start(0, [console.Console(None, log, rows=False), collector], command="qualify")
            q.reference = _reference(report.entries(session.manifest, user), session, spec)
            print(f"collbench: qualify {run_id} on {session.where}: {len(inv.nodes)} node(s), {inv.world_size} "
                  f"rank(s), backend {backend}, {spec.collectives[0]} {spec.dtypes[0]} up to "
                  f"{format_bytes(spec.max_bytes)}; reference {_describe(q.reference, len(inv.nodes))}; results -> {session.store.location}",
                  file=log, flush=True)
            groups = 0
            try:
                while probes := q.next_round():
                    rnd = q.rounds - 1
                    plan = Plan((tuple(Group(f"q{rnd}-g{i}", "qualify", rnd, _ranks(inv, p), phase=p.phase.value)
                                       for i, p in enumerate(probes)),))
                    collector.expect(plan, probes)
                    runner.spec = dataclasses.replace(runner.spec, group_timeout_s=collector.limit_s(probes))
                    runner.run(plan)
                    judged = q.record(collector.results())
                    groups += len(probes)
                    print(_round_line(rnd, probes, judged, runner.spec.group_timeout_s, q), file=log, flush=True)
                session.manifest["groups_total"] = groups
                session.finish(outcome)
            except KeyboardInterrupt as e:  # while measuring, or while compacting the rows
                session.interrupted()
                print(f"\ncollbench: interrupted; the probes so far are in {session.store.location}", file=sys.stderr,
                      flush=True)
                return exit_code(e)
    except KeyboardInterrupt as e:  # before the workers started, or while they were being released
        print_late_interrupt(session, "probe")
        return exit_code(e)
    except PlacementError as e:
        print(f"collbench: error: {e}", file=sys.stderr)
        return 1
    verdicts = _verdicts(q, inv)
    wall = time.monotonic() - t_start
    if args.format == "json":
        print(json.dumps({"run_id": run_id, "rounds": q.rounds, "wall_s": round(wall, 3),
                          "speed_judged": not q.unjudged, "unjudged": q.unjudged_note(), "nodes": verdicts}, indent=1))
    else:
        print(render_tables([("verdicts", [_table_row(v) for v in verdicts])], "table"))
    bad = [v for v in verdicts if v["verdict"] != Outcome.PASS.value]
    if q.unjudged:  # never a silent pass: a pass whose speed had no reference says so
        print(f"collbench: {q.unjudged_note()}", file=log, flush=True)
    print(f"collbench: {len(inv.nodes) - len(bad)} of {len(inv.nodes)} node(s) pass; {q.rounds} round(s), "
          f"{groups} probe(s), wall {wall:.1f}s, {session.startup.line()}; rows in {session.store.run_dir}",
          file=log, flush=True)
    return 1 if bad else 0


def spec_from_qualify_args(args: argparse.Namespace) -> SweepSpec:
    from orchestrator.commands.options import spec_from_args

    spec = spec_from_args(args)
    for name, values in (("--collectives", spec.collectives), ("--dtypes", spec.dtypes)):
        if len(values) != 1 or ALL in values:  # -d all: every dtype the backend has
            raise UsageError(f"{name} {','.join(values)}: qualify measures one (the verdicts compare like with like)")
    return dataclasses.replace(spec, output=resolve_output(spec.output))


def _ranks(inv: Inventory, probe: Probe) -> tuple[int, ...]:
    first = inv.first_rank()
    return tuple(first[i] + j for i in probe.nodes for j in range(inv.nodes[i].ranks))


def _reference(entries: list, session, spec: SweepSpec) -> Reference:
    """Expected busbw for each kind of probe where an entry applies to every node's platform."""
    from orchestrator.analysis import expected

    inv = session.inv
    tags = set.intersection(*(set(session.platforms[n.node_id].tags) if n.node_id in session.platforms else set()
                              for n in inv.nodes))
    rpn = max(n.ranks for n in inv.nodes)
    size = max(spec.sizes())

    def value(topology: str, world: int) -> float | None:
        entry = expected.find(entries, tags, spec.collectives[0], topology, size, world)
        return entry.busbw_gbps if entry else None

    across = "inter" if rpn == 1 else "mixed"
    return Reference(intra=value("intra", rpn) if rpn > 1 else None, pair=value(across, 2 * rpn),
                     gate=value(across, inv.world_size))


def _describe(ref: Reference, n_nodes: int) -> str:
    known = [f"{k} {v:g} GB/s" for k, v in dataclasses.asdict(ref).items() if v]
    if known:
        return "expected " + ", ".join(known)
    if n_nodes in ALL_PAIRS_NODES:
        return f"no expected value applies: every pair of the {n_nodes} nodes, against the median of their best pairs"
    unjudged = " (2 nodes: their speed cannot be judged without --expected)" if n_nodes < min(ALL_PAIRS_NODES) else ""
    return "no expected value applies: the median of each round" + unjudged


class _Collector(RunObserver):
    """The runner's observer for qualify: each probe's group ends as a qualify Result (its busbw at
    the largest size; who hung, died or left), and how long it took sets the next deadlines."""

    def __init__(self, q: Qualifier, inv: Inventory, deadlines: Deadlines) -> None:
        self.q, self.inv, self.deadlines = q, inv, deadlines
        self._probes: dict[str, Probe] = {}
        self._t0: dict[str, float] = {}
        self._results: list[Result] = []
        self._node = [i for i, n in enumerate(inv.nodes) for _ in range(n.ranks)]  # global rank -> node

    def expect(self, plan, probes: list[Probe]) -> None:
        self._probes = {g.group_id: p for g, p in zip(plan.groups, probes)}
        self._results = []

    def limit_s(self, probes: list[Probe]) -> float:
        return max(self.deadlines.limit_s(p.phase) for p in probes)

    def results(self) -> list[Result]:
        return self._results

    def group_started(self, event: GroupStarted) -> None:
        self._t0[event.group.group_id] = time.monotonic()

    def group_ended(self, event: GroupEnded) -> None:
        group, status, rows = event.group, event.status, event.rows
        probe = self._probes[group.group_id]
        wall = time.monotonic() - self._t0[group.group_id]
        if status is Status.OK:
            top = [r for r in rows if r["msg_bytes"] == max(x["msg_bytes"] for x in rows)]
            wrong = sum(r["n_wrong"] for r in rows)
            if wrong:
                result = Result(probe, Outcome.FAILED, None, (), f"{wrong} wrong element(s) in the checks")
            else:
                self.deadlines.took(probe.phase, wall)
                result = Result(probe, Outcome.PASS, statistics.median(r["busbw_gbps"] for r in top))
        else:
            result = self._failed(probe, status, event.failure)
        self._results.append(dataclasses.replace(result, group_id=group.group_id))

    def _failed(self, probe: Probe, status: Status, failure: GroupFailure) -> Result:
        """Culprits: nodes that left; else the nodes of ranks that did not answer a ping or died
        (none when every rank answered: the qualifier retests the members)."""
        nodes = sorted({self._node[r] for r in failure.ranks})
        gone = _gone(self.inv, nodes)
        if gone:
            return Result(probe, Outcome.LOST, None, gone, failure.error)
        if status is Status.SKIPPED:  # no worker could be placed there
            return Result(probe, Outcome.FAILED, None, tuple(nodes), failure.error)
        culprits = tuple(nodes) if failure.culprits else ()
        return Result(probe, Outcome.of_run(status), None, culprits, failure.error)


def _gone(inv: Inventory, nodes: list[int]) -> tuple[int, ...]:
    """Those of these nodes that have left the Ray cluster."""
    if not nodes:
        return ()
    import ray

    alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
    return tuple(i for i in nodes if inv.nodes[i].node_id not in alive)


def _round_line(rnd: int, probes: list[Probe], judged: list[Result], limit_s: float, q: Qualifier) -> str:
    counts: dict[str, int] = {}
    for r in judged:
        counts[r.status.value] = counts.get(r.status.value, 0) + 1
    named = sum(1 for v in q.verdicts.values() if v is not Outcome.PASS)
    if q.all_pairs_pending:
        found = "measured, judged with the last pair round"
    else:
        found = ("every pair: " if len(judged) > len(probes) else "") + ", ".join(
            f"{k} {v}" for k, v in sorted(counts.items()))
    return (f"collbench: round {rnd + 1} ({probes[0].phase.value}): {len(probes)} probe(s) [{found}], "
            f"deadline {limit_s:.0f}s; {named} node(s) named so far")


def _verdicts(q: Qualifier, inv: Inventory) -> list[dict]:
    """The qualifier's summary with nodes as operators know them (IP, host, Ray node id)."""
    out = []
    for item in q.summary():
        node = inv.nodes[item["node"]]
        evidence = [{**e, "nodes": [inv.nodes[i].ip for i in e["nodes"]]} for e in item["evidence"]]
        out.append({"node": node.ip, "host": node.hostname, "node_id": node.node_id, "verdict": item["verdict"],
                    "evidence": evidence})
    return out


def _table_row(v: dict) -> dict:
    """The verdict with the evidence that decided it: a failing node's last probe of its verdict's
    kind, a passing node's last probe that passed."""
    want = {Outcome.PASS.value} if v["verdict"] == Outcome.PASS.value else {o.value for o in Outcome} - {"pass"}
    e = next((e for e in reversed(v["evidence"]) if e["status"] in want), v["evidence"][-1] if v["evidence"] else {})
    partners = [ip for ip in e.get("nodes", []) if ip != v["node"]]
    return {"node": v["node"], "host": v["host"], "verdict": v["verdict"], "phase": e.get("phase"),
            "with": ",".join(partners[:3]) + (f",+{len(partners) - 3}" if len(partners) > 3 else ""),
            "busbw": e.get("busbw_gbps"), "reference": e.get("reference_gbps"),
            "detail": e.get("detail") or e.get("status")}
