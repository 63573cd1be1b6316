"""What a watch cycle is and decides, pure (no Ray): its record and alerts, which nodes it can
measure (idle, and big enough for its ranks), whom it doubts and with which partners, when it has
been blind too long, and its line. operations/watch.py is the loop
that acts on them."""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass, field
from enum import Enum

from orchestrator.analysis.compare import Verdict
from orchestrator.analysis.link import Link
from orchestrator.sweep.inventory import Inventory, Node
from orchestrator.sweep.qualify_types import NodeVerdict

BLIND_CYCLES = 3  # cycles in a row that measured nothing before a `blind` alert
FLAP_WINDOW, FLAP_CYCLES = 6, 2  # a node doubted in this many of the last measured cycles, and cleared each time


class AlertKind(str, Enum):
    """What an alert says of a node (its JSON value is the string): a qualify verdict (slow,
    intermittent, hang, failed, lost); drift, a drop qualify could not judge; doctor, a quick check
    that failed (unreachable, another software version, another MTU, ...); blind, cycles in a row
    that measured nothing (node "*", the whole watch); slow_uplink, a leaf's pairs across slow while
    those inside are not (node: the switch; with --topology); intermittent too where a node was doubted in
    several recent cycles and cleared by qualify each time (FLAP_CYCLES of FLAP_WINDOW)."""

    SLOW = "slow"
    INTERMITTENT = "intermittent"
    HANG = "hang"
    FAILED = "failed"
    LOST = "lost"
    DRIFT = "drift"
    DOCTOR = "doctor"
    BLIND = "blind"
    SLOW_UPLINK = "slow_uplink"  # a leaf switch's uplink (node: the switch, or two leaves' path "leaf0,leaf1")

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Alert:
    node: str  # the node's IP
    kind: AlertKind
    value: float | None  # what was measured (busbw GB/s), where a number says it
    reference: float | None  # what it was compared with
    message: str


@dataclass
class Cycle:
    cycle: int
    started_at: dt.datetime
    nodes_checked: list[str] = field(default_factory=list)
    nodes_busy: list[str] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)
    run_id: str | None = None
    qualify_run_id: str | None = None
    wall_s: float = 0.0
    note: str | None = None  # why nothing was measured, or what was cut short
    nodes_too_small: list[str] = field(default_factory=list)  # fewer CPUs (GPUs) in all than their ranks need
    ranks_per_node: int | None = None  # CPU ranks a node measured with (fitted to the nodes unless given)
    doubted: list[str] = field(default_factory=list)  # nodes the canary doubted (a drift or a flag), less the
    # partners of a node the cycle named (suspects(..., named))
    drift: str | None = None  # the comparison with the rolling baseline: compare's verdict and why (None: no baseline)
    actions: dict = field(default_factory=dict)  # node IP -> scheduler.Action that takes it out of service
    drained: dict = field(default_factory=dict)  # node IP -> scheduler.Done, where this cycle ran it (--drain)

    def to_json(self) -> dict:
        return {"cycle": self.cycle, "started_at": self.started_at.isoformat(), "nodes_checked": self.nodes_checked,
                "nodes_busy": self.nodes_busy, "alerts": [self._alert_json(a) for a in self.alerts],
                "run_id": self.run_id, "qualify_run_id": self.qualify_run_id, "wall_s": round(self.wall_s, 3),
                "note": self.note, "nodes_too_small": self.nodes_too_small, "ranks_per_node": self.ranks_per_node,
                "doubted": self.doubted, "drift": self.drift}

    def _alert_json(self, a: Alert) -> dict:
        """The alert, with the command that takes its node out of service and whether this cycle ran it."""
        act, done = self.actions.get(a.node), self.drained.get(a.node)
        return {**dataclasses.asdict(a), "kind": str(a.kind), "action": act.to_json() if act else None,
                "drained": {"ok": done.ok, "said": done.said} if done else None}

    def line(self) -> str:
        """The cycle as one line of text (--format table)."""
        alerts = "; ".join(a.message for a in self.alerts) or "no alert"
        busy = f", busy: {','.join(self.nodes_busy)}" if self.nodes_busy else ""
        busy += f", too small: {','.join(self.nodes_too_small)}" if self.nodes_too_small else ""
        note = f" ({self.note})" if self.note else ""
        # an unchanged drift goes without saying; an inconclusive one says why (a busy host, one baseline cycle)
        drift = f"; drift {self.drift}" if self.drift and not self.drift.startswith(Verdict.UNCHANGED.value) else ""
        return (f"collbench: watch cycle {self.cycle} at {self.started_at:%Y-%m-%dT%H:%M:%SZ}: "
                f"{len(self.nodes_checked)} node(s) checked{busy}; {alerts}{drift}; {self.wall_s:.1f}s{note}")

    @property
    def measured(self) -> bool:
        return self.run_id is not None


# -- what a cycle decides (pure) ------------------------------------------------------------
def fit_cpu_ranks(inv: Inventory, totals: dict[str, dict[str, float]], cpus_per_rank: float, ranks: int,
                  fit: bool) -> tuple[int, dict[str, str]]:
    """(CPU ranks a node gets this cycle, {node IP: why it is too small}) from each node's total CPUs
    (Ray's `Resources`, free or not). `fit`: the ranks are what the smallest node holds, up to
    `ranks` (a node of one CPU measures with one rank); else `ranks` exactly, and a node with fewer
    CPUs than they ask is too small. GPU nodes have a rank per GPU and are never too small here."""
    small: dict[str, str] = {}
    have = {n.ip: int(totals.get(n.node_id, {}).get("CPU", 0.0) // cpus_per_rank) if cpus_per_rank else ranks
            for n in inv.nodes if not n.gpus}
    if fit and have:
        usable = [h for h in have.values() if h >= 1]
        ranks = min(ranks, min(usable)) if usable else ranks
    for ip, holds in have.items():
        if holds < ranks:
            small[ip] = (f"too small for {ranks} rank(s) (has {holds} CPU(s) for them): give it more CPUs (ray start "
                         f"--num-cpus) or run watch with --ranks-per-node {max(holds, 1)}")
    return ranks, small


def blind_alert(cycles: list[Cycle], after: int) -> Alert | None:
    """An alert when the last `after` cycles measured nothing (every node busy, too small, or a
    cycle that failed before its first group): a watch that measures nothing says so."""
    last = cycles[-after:]
    if len(last) < after or any(c.measured for c in last):
        return None
    why = last[-1].note or "nothing measured"
    return Alert("*", AlertKind.BLIND, None, None, f"watch measured nothing in the last {after} cycles ({why})")


def flapping_alerts(cycles: list[Cycle], window: int = FLAP_WINDOW, at_least: int = FLAP_CYCLES) -> list[Alert]:
    """An `intermittent` alert for each node the last cycle doubted that was doubted (a drift
    beyond noise, or a flag) in at least `at_least` of the last `window` measured cycles and was
    not named in any of them: slow now and then, cleared each time by the qualification that
    followed (a flapping NIC passes a one-time check half the time). Said in the cycle that makes
    it `at_least`, and in later ones that doubt it again."""
    measured = [c for c in cycles if c.measured][-window:]
    if not measured or measured[-1] is not cycles[-1]:
        return []
    out = []
    for node in cycles[-1].doubted:
        named = any(a.node == node for c in measured for a in c.alerts)
        seen = [c.cycle for c in measured if node in c.doubted]
        if len(seen) >= at_least and not named:
            out.append(Alert(node, AlertKind.INTERMITTENT, None, None,
                             f"{node} intermittent: doubted in {len(seen)} of the last {len(measured)} measured cycles "
                             f"(cycles {', '.join(map(str, seen))}: a drift beyond noise or a flag), and cleared by "
                             "qualify each time"))
    return out


def busy_nodes(inv: Inventory, available: dict[str, dict[str, float]], cpus_per_rank: float) -> list[Node]:
    """Nodes another job holds part of: fewer GPUs free than the node has (GPU nodes), or fewer CPUs
    than its ranks ask for (CPU ranks asking `cpus_per_rank` each). A node Ray reports nothing
    free for is busy."""
    out = []
    for node in inv.nodes:
        free = available.get(node.node_id, {})
        if node.gpus:
            if free.get("GPU", 0.0) < node.ranks:
                out.append(node)
        elif free.get("CPU", 0.0) < cpus_per_rank * node.ranks:
            out.append(node)
    return out


def suspects(drops, flags, named: set[str] = frozenset(), uplinks: list[set[str]] = ()) -> set[str]:
    """Node IPs a cycle has reason to doubt: every node of a link that dropped beyond noise, and of
    a report flag (a slow pair, node or rail among its peers, below an expected value, a failed
    group). With `named` (the nodes the cycle's qualification named), a link or flag that holds a
    named node explains itself and casts no doubt on its other nodes: the partners of a slow node
    are not doubted again and again (and so not alerted as intermittent); the named stay doubted.
    `uplinks`: each slow uplink's nodes (those below its leaf): its own flag, and a link or flag
    with nodes on both sides of it, are the switch's evidence and doubt no node."""
    groups = [set(Link.parse(link).nodes) for link in drops] + \
        [set(f.nodes) for f in flags if str(f.kind) != AlertKind.SLOW_UPLINK.value]
    found: set[str] = set(named)
    for nodes in groups:
        crosses = any(nodes & below and nodes - below for below in uplinks)
        if not nodes & named and not crosses:
            found |= nodes
    return found


def with_partners(checked: list[str], doubted: set[str], at_least: int = 3) -> list[str]:
    """The suspects and enough good partners to tell them apart: as many partners as suspects, and
    at least `at_least` nodes in all (three let qualify judge speed without an expected value); all
    checked nodes when fewer are left. In the cluster's order."""
    good = [ip for ip in checked if ip not in doubted]
    want = max(len(doubted), at_least - len(doubted), 0)
    chosen = set(doubted) | set(good[:want])
    return [ip for ip in checked if ip in chosen]


def alerts_from(nodes: list[NodeVerdict], evidence: dict[str, tuple[float | None, float | None, str]]) -> list[Alert]:
    """An alert per node a qualification did not pass, with the canary's evidence for it where there
    is some (`evidence[ip]`: value, reference, what the canary saw)."""
    out = []
    for v in nodes:
        if v.passed:
            continue
        value, reference, seen = evidence.get(v.node, (None, None, ""))
        last = next((e for e in reversed(v.evidence) if e["status"] == v.verdict.value), {})
        value = last.get("busbw_gbps", value) if last else value
        reference = last.get("reference_gbps", reference) if last else reference
        detail = last.get("detail") or ""
        message = f"{v.node} ({v.host}) {v.verdict.value}" + (f": {detail}" if detail else "") + \
            (f"; canary: {seen}" if seen else "")
        out.append(Alert(v.node, AlertKind(v.verdict.value), value, reference, message))
    return out
