"""A qualification on Ray from start to end, the one body that `collbench qualify`, the Python API
(orchestrator.api: qualify, preflight) and `collbench watch` call: `sweep.qualify.Qualifier`
decides each round's probes (groups of whole nodes), each round runs on Ray as a sweep's round
does (its rows, with their `phase`, go to the same dataset as a run's), and what each probe
reached goes back to the qualifier. The run ends as a sweep does (execution.jobs): interrupted,
on a full disk or failed, its manifest says so."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import time
from dataclasses import dataclass, field

from orchestrator import scheduler
from orchestrator.errors import UsageError
from orchestrator.execution.jobs import new_run_id, rates_here, say_warnings
from orchestrator.execution.voice import COMMAND_LINE, Voice
from orchestrator.judging.defaults import MIN_FRACTION, PEER_THRESHOLD
from orchestrator.judging.judge import prior_for
from orchestrator.operations.qualify_rounds import Collector, RoundProgress, run_rounds
from orchestrator.results.schema import RunState
from orchestrator.scheduler import Action, Done
from orchestrator.sweep import topology
from orchestrator.sweep.inventory import Inventory
from orchestrator.sweep.qualify import Deadlines, Outcome, Qualifier, Reference
from orchestrator.sweep.qualify_types import NodeVerdict
from orchestrator.sweep.sizes import format_bytes
from orchestrator.sweep.spec import SweepSpec
from orchestrator.sweep.topology import Topology


@dataclass
class Qualification:
    """Verdicts per node (node, host, node_id, verdict, evidence), and how the qualification went."""

    run_id: str
    state: RunState
    exit_code: int  # 0: every node passes; 1: one does not (or the run could not finish); 130/143; 138: SIGUSR1
    nodes: list[NodeVerdict] = field(default_factory=list)
    rounds: int = 0
    probes: int = 0
    speed_judged: bool = True
    unjudged: str | None = None  # why a speed could not be judged, where it could not
    agreement: str | None = None  # nothing slow and no expected value: what that does and does not say
    wall_s: float = 0.0
    startup: str = ""
    rows_at: str = ""
    message: str | None = None
    uplinks: list[dict] = field(default_factory=list)  # slow uplinks (qualify_switches.SlowUplink.to_json)
    actions: dict[str, Action] = field(default_factory=dict)  # by node IP: what takes it out of its scheduler
    drained: dict[str, Done] = field(default_factory=dict)  # by node IP: how running that went (--drain)
    unsettled: list[str] | None = None  # stopped early (SIGUSR1): the node IPs without a verdict; `nodes`, the named

    @property
    def judged(self) -> bool:
        """It ended with verdicts: finished, or stopped early with those the rounds so far gave."""
        return self.finished or self.unsettled is not None

    @property
    def finished(self) -> bool:
        """Every node has a verdict; else the qualification ended early (`message`)."""
        return self.state == RunState.FINISHED

    @property
    def failing(self) -> list[NodeVerdict]:
        """The nodes that did not pass: what to exclude."""
        return [v for v in self.nodes if not v.passed]


def qualification(spec: SweepSpec, *, threshold: float = PEER_THRESHOLD, min_fraction: float = MIN_FRACTION, seed: int = 0,
                  user_entries: list | None = None, voice: Voice = COMMAND_LINE, log=None,
                  placement_group=None, cpus_per_rank: float = 0.0, partition: str | None = None,
                  doctor: bool = True, switches: Topology | None = None,
                  every_node_placed: bool = True, run_id: str | None = None) -> Qualification:
    """Qualify the cluster's nodes (or `spec.nodes`, less `spec.exclude`; or a caller's placement
    group's); `log`: where the console prints failed probes (its progress goes to stderr; None:
    no console); `switches`: the switch tree whose leaves pairs are judged inside and across (a node a
    given file does not list is refused where `every_node_placed`, else judged without a leaf); `run_id`:
    the run's name (default: a new one). SIGUSR1 ends it after the round in flight (`unsettled`)."""
    from orchestrator.analysis import report
    from orchestrator.execution import console, signals
    from orchestrator.execution.lifecycle import live
    from orchestrator.execution.session import Session

    t_start = time.monotonic()
    now = dt.datetime.now(dt.timezone.utc)
    run_id = run_id or new_run_id(now)
    result = Qualification(run_id, RunState.FAILED, 1)
    done: dict = {"groups": 0}

    def body(session: Session) -> None:
        inv, backend = session.cluster()
        rpn = max(n.ranks for n in inv.nodes)
        if len(inv.nodes) < 2 and rpn < 2:
            raise UsageError("qualify needs two nodes, or nodes with more than one rank (--ranks-per-node)")
        session.check_devices({rpn, 2 * rpn, inv.world_size})
        inv = session.inv or inv  # GPU nodes: with their NVLink domains, read by the devices' check
        leaf_of = placed(switches, inv.nodes, every_node_placed)  # refused before any worker starts
        q = Qualifier(len(inv.nodes), rpn, threshold, seed=seed, min_fraction=min_fraction,
                      domains=tuple(n.nvlink_domain for n in inv.nodes), prior=prior_for(backend, True),
                      leaves=tuple(leaf_of.get(n.ip) for n in inv.nodes) if leaf_of else (),
                      parents=switches.parent_of() if switches else {})
        done["q"], done["inv"] = q, inv
        collector = Collector(inv, Deadlines(spec.group_timeout_s))
        shown = [console.Console(None, log, rows=False)] if log is not None else []
        runner, outcome = session.start(0, [*shown, collector], command="qualify")
        if switches is not None:
            session.manifest["switches"] = json.dumps({**switches.to_json(), "leaves": leaf_of})
            unplaced = [n.hostname for n in inv.nodes if n.ip not in leaf_of]
            voice.say(f"collbench: switches from {switches.source}: " + ", ".join(
                f"{leaf} {sum(v == leaf for v in leaf_of.values())} node(s)" for leaf in dict.fromkeys(
                    leaf_of[n.ip] for n in inv.nodes if n.ip in leaf_of)) + (
                f"; under none of them, judged without a leaf: {', '.join(unplaced)}" if unplaced else ""))
        say_warnings(session.diagnosis, voice)
        q.reference = _reference(report.entries(session.manifest, user_entries or []), session, spec)
        voice.say(f"collbench: qualify {run_id} on {session.where}: {len(inv.nodes)} node(s), {inv.world_size} "
                  f"rank(s), backend {backend}, {spec.collectives[0]} {spec.dtypes[0]} up to "
                  f"{format_bytes(spec.max_bytes)}; reference {_describe(q.reference, len(inv.nodes))}; "
                  f"results -> {session.store.location}")
        progress = RoundProgress(shown[0], rates_here(runner.spec, inv, backend), backend) if shown else None
        unsettled = run_rounds(q, inv, runner, collector, voice, done, progress)
        done["names"] = {i.node_ip: i.scheduler_node for i in session.pool.infos() if i.scheduler_node}
        session.manifest["groups_total"] = done["groups"]  # a qualification's groups are known as they run
        if unsettled is not None:  # stopped ahead of a time limit: the run ends interrupted, with these verdicts
            done["unsettled"] = unsettled
            raise signals.StopRequested()
        session.finish(outcome)

    session, finished = live(
        lambda: Session(spec, run_id, now, placement_group=placement_group, cpus_per_rank=cpus_per_rank,
                        partition=partition, doctor=doctor, voice=voice),
        body, result, voice=voice, unit="probe",
        interrupted_line=lambda s: f"collbench: interrupted; the probes so far are in {s.store.location}")
    if finished or "unsettled" in done:
        q, inv = done["q"], done["inv"]
        result.nodes = _verdicts(q, inv, done.get("names", {}))
        result.uplinks = [u.to_json([n.ip for n in inv.nodes]) for u in q.uplinks]
        result.rounds, result.unjudged, result.speed_judged = q.rounds, q.unjudged_note(), not q.unjudged
    if finished:
        result.state, result.agreement = RunState.FINISHED, q.agreement()
        result.exit_code = 1 if result.failing or result.uplinks else 0
    elif "unsettled" in done:  # stopped early: the nodes named so far are named, the others unsettled
        result.nodes, result.unsettled = result.failing, [inv.nodes[i].ip for i in done["unsettled"]]
        result.exit_code = 1 if result.nodes or result.uplinks else result.exit_code
    return _closed(result, session, t_start, done["groups"])


def _closed(result: Qualification, session, t_start: float, probes: int) -> Qualification:
    result.wall_s, result.probes = time.monotonic() - t_start, probes
    if session is not None:
        result.startup, result.rows_at = session.startup.line(), session.store.run_dir
    return result


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
    unjudged = "" if n_nodes >= 3 else (" (1 node: its speed cannot be judged without --expected)" if n_nodes == 1
                                         else f" ({n_nodes} nodes: their speed cannot be judged without --expected)")
    return ("no expected value applies: what the fastest agreeing probes delivered (a probe is as fast as its "
            "slowest node)" + unjudged)


def placed(switches: Topology | None, nodes, strict: bool = True) -> dict[str, str]:
    """Each node's leaf (by IP) under `switches`, the nodes matched by Slurm name (inside a job:
    `scontrol show node`'s host name and address), host name or IP; {} without a tree. A node a
    given file does not list is refused (`strict`); one Slurm's own tree does not list (Slurm
    allows it) is judged without a leaf, as is any where not `strict`."""
    if switches is None:
        return {}
    slurm = scheduler.slurm_nodes(os.environ)

    def name(node) -> str | None:
        known = {node.ip, node.hostname, node.hostname.split(".")[0]}
        return next((s for s, other in slurm.items() if ({s} | other) & known), None)
    return topology.place(switches, [(n.ip, n.hostname, name(n)) for n in nodes],
                          strict=strict and switches.complete)


def _verdicts(q: Qualifier, inv: Inventory, names: dict[str, str]) -> list[NodeVerdict]:
    """The qualifier's summary with nodes as operators know them (IP, host, Ray node id, and the
    scheduler's name where the workers were started under one: `names`, by IP)."""
    out = []
    under = {n: u for u in q.uplinks for n in u.nodes}
    for item in q.summary():
        node = inv.nodes[item["node"]]
        evidence = [{**e, "nodes": [inv.nodes[i].ip for i in e["nodes"]]} for e in item["evidence"]]
        detail = item["detail"]
        if item["node"] in under and item["verdict"] == Outcome.PASS.value:
            detail = "; ".join(filter(None, [detail, f"under slow_uplink {','.join(under[item['node']].switches)}: "
                                             "its pairs across are the switch's evidence"]))
        out.append(NodeVerdict(node.ip, node.hostname, node.node_id, Outcome(item["verdict"]), detail,
                               tuple(evidence), names.get(node.ip)))
    return out
