"""`collbench doctor` on Ray: one short agent per node (no GPU work, no collective) reads its facts
(doctor.facts) and listens and connects as the collectives would (doctor.reach), all nodes at
once; the checks (doctor.checks) are the driver's. The same runs in a run's or qualify's own
workers before their first group (`quick`: what would make the sweep fail or lie), through Ray's
__ray_call__, so it starts no process of its own there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from orchestrator.doctor import checks as ck
from orchestrator.doctor import diagnostics, fleet, platform_checks, reach, settings
from orchestrator.doctor import facts as fx
from orchestrator.errors import UsageError, first_line
from orchestrator.sweep.inventory import Inventory

# what a run refuses on before its first group: a sweep that would hang or lie (quick part)
QUICK = ("same python", "same collbench", "same ray", "same torch", "same nccl", "same MTU", "interface",
         "/dev/shm", "memlock", "/dev/infiniband", "GPUs in Ray", "reachable")


@dataclass
class Diagnosis:
    cluster: list[ck.Check] = field(default_factory=list)
    nodes: list[dict] = field(default_factory=list)  # node, host, checks
    wall_s: float = 0.0
    facts: list[fx.NodeFacts] = field(default_factory=list)

    def facts_json(self) -> dict[str, dict]:
        """Every node's facts by IP: what a run's manifest keeps, for the report's explanations."""
        return {f.ip: f.to_json() for f in self.facts}

    @property
    def status(self) -> str:
        return ck.worst(self.cluster + [c for n in self.nodes for c in n["checks"]])

    def to_json(self) -> dict:
        return {"cluster": [c.to_json() for c in self.cluster],
                "nodes": [{**n, "checks": [c.to_json() for c in n["checks"]]} for n in self.nodes]}

    def failures(self, names: tuple[str, ...] | None = None) -> list[tuple[str, str, ck.Check]]:
        """(node, host, check) of every failed node check (of `names`, when given)."""
        return [(n["node"], n["host"], c) for n in self.nodes for c in n["checks"]
                if c.status == ck.FAIL and (names is None or c.name in names)]


class _Agent:
    """A doctor's hands on one node: a plain object; what it does comes by __ray_call__."""


def _facts_in(holder, ip: str, gpus: bool) -> fx.NodeFacts:
    return fx.gather(ip, gpus=gpus)


def _quick_facts_in(holder, ip: str, gpus: bool) -> fx.NodeFacts:
    """In a run's worker: its own torch and Ray are the run's (read in this process, which has
    them imported), no subprocess."""
    import sys

    import orchestrator

    facts = fx.gather(ip, gpus=gpus, run=_no_software(fx._run))
    torch = sys.modules.get("torch")
    nccl = None
    if torch is not None and torch.version.cuda and gpus:
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # noqa: BLE001 - a torch that cannot load NCCL: said by the driver check
            nccl = None
    return fx.NodeFacts(**{**facts.__dict__, "collbench": orchestrator.__version__, "ray": ray.__version__,
                           "torch": str(torch.__version__) if torch else None,  # a plain str: no torch import to read it
                           "torch_cuda": torch.version.cuda if torch else None, "nccl": nccl,
                           "problems": tuple(p for p in facts.problems if not p.startswith("software"))})


def _no_software(run):
    def wrapped(cmd: list[str]) -> str:
        if cmd[1:2] == ["-c"] and "import orchestrator" in cmd[2]:
            raise OSError("read in the worker")
        return run(cmd)

    return wrapped


def diagnose(inv: Inventory, agents: dict[str, object] | None = None, quick: bool = False,
             timeout_s: float = 30.0, env: dict[str, str] | None = None) -> Diagnosis:
    """Every check on every node of `inv`; `agents` (node id -> a worker already there) for the
    quick part a run makes, else one agent per node for the command; `env`: the run's --env, judged
    on top of each node's own variables."""
    import time

    t0 = time.monotonic()
    made = agents is None
    if made:
        cls = ray.remote(num_cpus=0)(_Agent)
        agents = {n.node_id: cls.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n.node_id, soft=False),
                                         max_restarts=0).remote() for n in inv.nodes}
    try:
        nodes = list(inv.nodes)
        handles = [agents[n.node_id] for n in nodes]
        read = _quick_facts_in if quick else _facts_in
        facts = _get([h.__ray_call__.remote(read, n.ip, n.gpus > 0) for n, h in zip(nodes, handles)], nodes,
                     timeout_s, "read its facts")
        ports = _get([h.__ray_call__.remote(reach.listen, n.ip) for n, h in zip(nodes, handles)], nodes, timeout_s,
                     "listen")
        pairs = reach.plan(len(nodes))
        targets: dict[int, list[int]] = {}
        for a, b in pairs:
            targets.setdefault(a, []).append(b)
        refs = {a: handles[a].__ray_call__.remote(reach.connect_all, nodes[a].ip,
                                                  [(nodes[b].ip, ports[b]) for b in bs])
                for a, bs in targets.items()}
        outcome = _get(list(refs.values()), [nodes[a] for a in refs], timeout_s + reach.CONNECT_TIMEOUT_S, "connect")
        attempts = {(a, b): err for (a, bs), errs in zip(targets.items(), outcome) for b, err in zip(bs, errs)}
        ray.get([h.__ray_call__.remote(reach.close) for h in handles], timeout=timeout_s)
    finally:
        if made:
            for h in agents.values():
                ray.kill(h, no_restart=True)
    return judge(inv, facts, attempts, time.monotonic() - t0, env)


def judge(inv: Inventory, facts: list[fx.NodeFacts], attempts: dict, wall_s: float = 0.0,
          env: dict[str, str] | None = None) -> Diagnosis:
    """The checks of the facts every node reported and of the connections tried (pure)."""
    ips = [n.ip for n in inv.nodes]
    cluster, per_node = [], {ip: [] for ip in ips}
    for checks, mine in (ck.same_everywhere(facts), ck.same_mtu(facts), fleet.odd_ones_out(facts),
                         settings.settings_checks(facts, env)):
        cluster += checks
        for ip, own in mine.items():
            per_node[ip] += own
    reachable, reach_nodes = reach.verdicts(ips, attempts)
    out = Diagnosis(cluster=[*cluster, reachable], wall_s=wall_s, facts=list(facts))
    for node, f in zip(inv.nodes, facts):
        own = [*per_node[node.ip], *reach_nodes[node.ip], *ck.node_checks(f, node.gpus),
               *platform_checks.checks(f), diagnostics.check(f)]
        out.nodes.append({"node": node.ip, "host": node.hostname or f.hostname, "checks": own})
    return out


def _get(refs: list, nodes: list, timeout_s: float, what: str) -> list:
    ready, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    if pending:
        late = [n.ip for n, r in zip(nodes, refs) if r in set(pending)]
        raise UsageError(f"doctor: node(s) {', '.join(late)} did not {what} within {timeout_s:g}s")
    try:
        return ray.get(refs, timeout=0)
    except Exception as e:  # noqa: BLE001 - an agent that died: said in one line
        raise UsageError(f"doctor: a node's agent failed to {what} ({first_line(e)})") from None


class DoctorRefusal(UsageError):
    """The quick checks found what would make the sweep fail or lie: one line, and what was found."""

    def __init__(self, line: str, diagnosis: Diagnosis) -> None:
        super().__init__(line)
        self.diagnosis = diagnosis


def refusal(d: Diagnosis) -> str | None:
    """The one line a run refuses with when the quick checks failed: every failing node with every
    check it failed, and the one --exclude that leaves them all out; None when none failed."""
    failed = d.failures(QUICK)
    if not failed:
        return None
    by_node: dict[tuple[str, str], list] = {}
    for node, host, check in failed:
        by_node.setdefault((node, host), []).append(check)
    parts = []
    for (node, host), checks in by_node.items():
        said = "; ".join(f"{c.name}: {c.detail}" + (f" ({c.hint})" if c.hint else "") for c in checks)
        parts.append(f"node {node} ({host}): {said}")
    nodes = ",".join(node for node, _ in by_node)
    return (f"{len(by_node)} node(s) failed the quick checks: " + " | ".join(parts)
            + f"; leave {'it' if len(by_node) == 1 else 'them'} out with --exclude {nodes}, or skip these checks "
            "with --no-doctor")