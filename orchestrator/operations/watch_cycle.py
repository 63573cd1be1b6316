"""What a watch cycle judges once its canary sweep has run, one function per step (the loop in
operations/watching.py calls them in order): every link against its rolling baseline (`drift`),
the report's flags, by leaf where a switch tree is given (`flags`), a slow uplink as the switch's
alert (`uplink_alerts`), a qualification of the suspects and partners (`qualify_suspects`), and
for each node it names the scheduler's command that takes it out of service, run under --drain
once per node (`take_out`)."""

from __future__ import annotations

import dataclasses
import os

from orchestrator import scheduler
from orchestrator.execution.canary import Alert, AlertKind, Cycle, alerts_from, with_partners
from orchestrator.execution.voice import QUIET
from orchestrator.results.schema import RunState
from orchestrator.scheduler import Done, Scheduler
from orchestrator.sweep.inventory import Node
from orchestrator.sweep.qualify_switches import said
from orchestrator.sweep.spec import SweepSpec
from orchestrator.sweep.topology import Topology

# the alerts that are a qualify verdict of one node: what a scheduler takes out of service
NODE_VERDICTS = frozenset({AlertKind.SLOW, AlertKind.INTERMITTENT, AlertKind.HANG, AlertKind.FAILED, AlertKind.LOST})


def check_listed(switches: Topology | None, spec: SweepSpec) -> None:
    """Refused (UsageError, one line) where a switch tree from a file does not list a node the watch
    may measure now, as qualify refuses it; Slurm's own tree may leave nodes out, and nodes that
    join later are judged without a leaf (`leaves`)."""
    import ray

    if switches is None or not switches.complete:
        return
    leaves(switches, list(selected(spec, ray.nodes(), spec.ranks_per_node).nodes), strict=True)


def selected(spec: SweepSpec, ray_nodes: list[dict], ranks: int):
    """The Ray nodes the watch may measure with `ranks` CPU ranks each: --nodes less --exclude, each
    by IP, Ray node id, host name, or inside a Slurm job its Slurm name."""
    from orchestrator.sweep import inventory

    named = scheduler.aliases(spec.nodes + spec.exclude, os.environ)  # Slurm's names
    return inventory.select(inventory.from_ray_nodes(ray_nodes, ranks), spec.nodes, spec.exclude, named)


def leaves(switches: Topology | None, nodes: list[Node], strict: bool = False) -> tuple[dict[str, str], list[Node]]:
    """(each node's leaf by IP under the switch tree, the nodes it does not list: judged without a
    leaf; refused where `strict`); ({}, []) without a tree."""
    from orchestrator.operations.qualifying import placed

    if switches is None:
        return {}, []
    leaf_of = placed(switches, nodes, strict)
    return leaf_of, [n for n in nodes if n.ip not in leaf_of]


def below(alerts: list[Alert], leaf_of: dict[str, str], parents: dict[str, str] | None = None) -> list[set[str]]:
    """The nodes below each switch of a slow uplink the alerts name (a leaf, or a switch above
    leaves: `parents`), a set per switch."""
    from orchestrator.sweep.topology import below as under

    names = {s for a in alerts if a.kind is AlertKind.SLOW_UPLINK for s in a.node.split(",")}
    return [under(s, leaf_of, parents or {}) for s in sorted(names)]


def earlier_runs(spec: SweepSpec, baseline_cycles: int) -> list[str]:
    """Watch cycles already in the output, of this sweep, newest last: the rolling baseline to start from."""
    from orchestrator.errors import UsageError
    from orchestrator.operations.compare import sweep_key, sweep_of
    from orchestrator.results import dataset

    try:
        known = dataset.runs(spec.output)
    except UsageError:  # no rows yet
        return []
    mine = sweep_key("watch", spec.to_json())
    return [r for r in known if sweep_of(spec.output, r) == mine][-baseline_cycles:]


def drift(output: str, clean_runs: list[str], run_id: str, threshold: float) -> tuple[list[str], dict, str | None]:
    """Links that dropped beyond noise against the rolling baseline (`clean_runs`), per node its
    worst drop, and what the comparison concluded (compare's verdict and why; None without a
    baseline yet)."""
    from orchestrator.analysis.compare import COLUMNS, compare, conclusion
    from orchestrator.analysis.link import Link
    from orchestrator.results import dataset

    if not clean_runs:
        return [], {}, None
    import pyarrow as pa

    base = pa.concat_tables([dataset.load_table(output, r, columns=COLUMNS) for r in clean_runs])
    new = dataset.load_table(output, run_id, columns=COLUMNS)
    matched, _, _ = compare(base, new, threshold, "link")
    concluded = conclusion(matched, base, new).line if len(matched) else None
    flagged = matched[matched.flag] if len(matched) else matched
    evidence: dict[str, tuple[float | None, float | None, str]] = {}
    for _, r in flagged.sort_values("busbw_change").iterrows():
        for ip in Link.parse(r.link).nodes:
            evidence.setdefault(ip, (float(r.busbw_gbps_new), float(r.busbw_gbps_base),
                                     f"{r.collective} {int(r.msg_bytes)} B on {r.link}: {r.busbw_change:+.0%} "
                                     f"against its baseline (noise floor {r.noise_floor:.0%}, {r.noise_source})"))
    return sorted(set(flagged.link)) if len(flagged) else [], evidence, concluded


def flags(output: str, run_id: str, threshold: float, user_entries: list, min_fraction: float,
          leaf_of: dict[str, str] | None = None, parents: dict[str, str] | None = None) -> list:
    """The report's flags of the cycle: its peers (slow pairs, nodes, rails; with `leaf_of`, node IP
    -> leaf, and `parents`, switch -> the switch above, pairs judged inside and across switches and a
    slow uplink flagged as the switch), expected values, and its failed groups (with their nodes)."""
    from orchestrator.operations.report import read_report, run_frame

    frame = run_frame(output, run_id)
    if leaf_of:
        frame.leaves = {code: leaf_of[ip] for code, ip in enumerate(frame.nodes) if ip in leaf_of}
        frame.parents = parents or {}
    return read_report(output, frame, threshold, "GBps", None, user_entries, min_fraction).flags


def uplink_alerts(found: list) -> list[Alert]:
    """A `slow_uplink` alert per slow uplink, named by its switches (the alert's node), its nodes
    the evidence: from the report's flags (kind slow_uplink) or a qualification's `uplinks`."""
    out, seen = [], set()
    for f in found:
        item = f if isinstance(f, dict) else {**f.extra, "nodes": f.nodes, "detail": f.message,
                                              "busbw_gbps": f.value, "reference": f.reference}
        if "switches" not in item or tuple(item["switches"]) in seen:
            continue
        seen.add(tuple(item["switches"]))
        out.append(Alert(",".join(item["switches"]), AlertKind.SLOW_UPLINK, item.get("busbw_gbps"),
                         item.get("reference"), said(item["switches"], item["detail"], len(item["nodes"]))))
    return out


def qualify_suspects(spec: SweepSpec, idle: list[Node], doubted: set[str], evidence: dict, *, partition: str,
                     threshold: float, min_fraction: float, user_entries: list, ranks: int, cpus_per_rank: float,
                     switches: Topology | None = None):
    """Qualify the suspects and good partners at once (with the switch tree: judged by leaf, nodes
    it does not list without one); (its run id, its alerts, the qualification; None where it did
    not finish)."""
    from orchestrator.operations.qualifying import qualification

    checked = [n.ip for n in idle]
    chosen = with_partners(checked, doubted)
    ids = {n.ip: n.node_id for n in idle}
    spec = dataclasses.replace(spec, nodes=tuple(ids[ip] for ip in chosen), exclude=(),
                               collectives=spec.collectives[:1], dtypes=spec.dtypes[:1],
                               min_bytes=spec.max_bytes, ranks_per_node=ranks)
    found = qualification(spec, threshold=threshold, min_fraction=min_fraction, user_entries=user_entries,
                          voice=QUIET, cpus_per_rank=cpus_per_rank, partition=partition, doctor=False,
                          switches=switches, every_node_placed=False)
    if found.state is not RunState.FINISHED:
        return found.run_id, [], None
    alerts = alerts_from(found.nodes, evidence) + uplink_alerts(found.uplinks)
    if not found.speed_judged:  # too few nodes to judge speed: the drop itself is the evidence
        named = {a.node for a in alerts}
        alerts += [Alert(ip, AlertKind.DRIFT, *evidence[ip][:2], f"{ip}: {evidence[ip][2]} (qualify could not judge "
                         "its speed: too few nodes without an expected value)")
                   for ip in sorted(evidence) if ip not in named and ip in chosen]
    return found.run_id, alerts, found


def scheduler_names(found, sched: Scheduler) -> dict[str, str]:
    """Node IP -> the name `sched` takes it out of service by, from a qualification's verdicts: the
    scheduler's name, else (not under Kubernetes, where a host name is a pod's) its host name."""
    if found is None:
        return {}
    return {v.node: v.name or v.host for v in found.nodes if v.name or sched is not Scheduler.KUBERNETES}


def take_out(cycle: Cycle, names: dict[str, str], sched: Scheduler, drain: bool, drained: dict[str, Done]) -> list[str]:
    """For each node a cycle's alert names with a verdict (slow, intermittent, hang, failed, lost;
    never drift, doctor, a switch or the blind watch), the command that takes it out of `sched`'s
    service, by `names[ip]` (its scheduler name, else host name); run where `drain` and this watch
    has not run it yet (`drained`, by IP, kept across cycles). Records both on the cycle; the lines
    to say."""
    lines = []
    run_id = cycle.qualify_run_id or cycle.run_id or ""
    for alert in cycle.alerts:
        if alert.kind not in NODE_VERDICTS or alert.node in cycle.actions or alert.node not in names:
            continue  # under Kubernetes a node without COLLBENCH_NODE_NAME has no name to cordon by
        act = scheduler.action(sched, names[alert.node], alert.kind.value, alert.message.split(": ", 1)[-1], run_id)
        if act is None:
            continue
        cycle.actions[alert.node] = act
        if drain and alert.node not in drained:
            drained[alert.node] = cycle.drained[alert.node] = scheduler.run(act)
            lines.append(drained[alert.node].line())
        elif alert.node not in drained:
            lines.append(f"collbench: to take {act.node} out of service: " + "; ".join(act.shown()))
    return lines
