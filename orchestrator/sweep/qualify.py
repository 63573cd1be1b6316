"""Qualify: localise slow and hanging nodes in a few rounds, not N-1. Pure: it proposes rounds of
probes (groups of whole nodes) and reads their outcomes; `collbench qualify` runs the probes on
Ray, `simulate` runs them against a model of N nodes.

Rounds (each probe of a round runs at the same time, on disjoint nodes):
1. intra: every node alone (its ranks together), when nodes have more than one rank;
2. pairs: a random perfect matching of the nodes not yet condemned;
3. retest: each member of a slow, failed or hung pair (and a node left out of an odd matching)
   with a partner that already passed, all at once (more rounds only when partners run short):
   the member that is slow or hangs again is the culprit; if both members pass with good
   partners, the pair's own path was slow and both pass;
4. gate: every node still passing, in one group;
5. bisect: when the gate is slow or hangs without naming a culprit, its halves at the same time,
   then the failing halves' halves, down to five nodes or fewer, each of which is retested with
   two good partners (so a fault that shows only in groups of more than two nodes is found too);
   then the gate once more (also after a gate that named its culprits, without them).
A probe is slow when its busbw is below `min_fraction` of the expected value for the platform,
where one is known (so one bad node is caught even when most of the cluster is bad), else below
(1 - threshold) of the median of its round's probes of the same kind (the retests, the gate and
bisections, which have no peers of their own, against the pairs' median; the last two with twice
the threshold); a median needs three probes (with two, which one is off cannot be said), so
without expected values the speed of clusters of fewer than six nodes is not judged (of fewer
than three, intra-node). A hung or failed probe names its culprits when some ranks did not
answer a ping (stopped processes) or died; otherwise its members are retested. A node that left
the cluster is lost.
"""

from __future__ import annotations

import dataclasses
import random
import statistics
from dataclasses import dataclass, field
from enum import Enum

_MAX_GATES = 3
MIN_PEERS = 3  # a median of two cannot say which one is off: without expected values, speed needs three


class Verdict(str, Enum):
    PASS = "pass"
    SLOW = "slow"
    HANG = "hang"
    FAILED = "failed"  # a rank raised or returned wrong results
    LOST = "lost"


_VERDICT_OF = {"hang": Verdict.HANG, "failed": Verdict.FAILED, "lost": Verdict.LOST}


@dataclass(frozen=True)
class Probe:
    phase: str  # intra, pairs, retest, gate, bisect
    nodes: tuple[int, ...]


@dataclass(frozen=True)
class Result:
    probe: Probe
    status: str  # ok, slow (set by the qualifier), hang, failed, lost
    busbw: float | None = None
    culprits: tuple[int, ...] = ()  # nodes whose ranks did not answer, died or left
    detail: str = ""
    reference: float | None = None  # what it was judged against (GB/s), set by the qualifier
    group_id: str = ""  # the caller's name for the probe's run (collbench: its group, in the rows)


@dataclass
class Reference:
    """What a healthy probe reaches, where known (from expected values), in GB/s."""

    intra: float | None = None
    pair: float | None = None
    gate: float | None = None


@dataclass
class Qualifier:
    n_nodes: int
    ranks_per_node: int
    threshold: float = 0.10
    reference: Reference = field(default_factory=Reference)
    seed: int = 0
    min_fraction: float = 0.8  # of an expected value
    rounds: int = 0
    verdicts: dict[int, Verdict] = field(default_factory=dict)
    evidence: dict[int, list[Result]] = field(default_factory=dict)
    _good: set[int] = field(default_factory=set)
    _suspects: list[tuple[int, int]] = field(default_factory=list)  # (node, good partners to test it with)
    _gates: int = 0
    _gate_again: bool = True  # the first gate, and one after each failed gate (at most _MAX_GATES)
    _pair_median: float | None = None
    _queue: list[list[Probe]] = field(default_factory=list)
    _phase: str = "start"

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self.evidence = {i: [] for i in range(self.n_nodes)}

    # -- what to run next -------------------------------------------------------------------
    def next_round(self) -> list[Probe]:
        """The next round's probes; [] when every node has its verdict."""
        while True:
            if self._queue:
                self.rounds += 1
                return self._queue.pop(0)
            if not self._advance():
                return []

    def _advance(self) -> bool:
        """Move to the next phase; False when the qualification is over."""
        alive = self._open()
        if self._phase == "start":
            self._phase = "intra"
            if self.ranks_per_node > 1 and alive:
                self._queue.append([Probe("intra", (i,)) for i in alive])
                return True
        if self._phase == "intra":
            self._phase = "pairs"
            self._rng.shuffle(alive)
            pairs = [Probe("pairs", (a, b)) for a, b in zip(alive[::2], alive[1::2])]
            if len(alive) % 2 and len(alive) > 1:
                self._suspects.append((alive[-1], 1))  # left out: tested against a good partner
            if pairs:
                self._queue.append(pairs)
                return True
        if self._phase in ("pairs", "retest", "gate", "bisect"):
            if self._suspects:
                self._phase = "retest"
                return self._plan_retests()
            members = tuple(sorted(self._open()))
            if self._gate_again and self._gates < _MAX_GATES and len(members) > 2:
                self._phase, self._gates, self._gate_again = "gate", self._gates + 1, False
                self._queue.append([Probe("gate", members)])
                return True
        self._phase = "done"
        for i in range(self.n_nodes):
            self.verdicts.setdefault(i, Verdict.PASS)
        return False

    def _open(self) -> list[int]:
        return [i for i in range(self.n_nodes) if i not in self.verdicts]

    def _plan_retests(self) -> bool:
        """Each suspect with its own good partners; as many at once as the partners allow."""
        partners = sorted(self._good - {s for s, _ in self._suspects})
        todo, self._suspects = self._suspects, []
        if not partners:  # nobody known good: a suspect cannot be told from its partners
            for s, _ in todo:
                self._condemn(s, Verdict.SLOW)
            return True
        while todo:
            probes, free = [], list(partners)
            while todo and len(free) >= todo[0][1]:
                s, k = todo.pop(0)
                probes.append(Probe("retest", (s, *free[:k])))
                free = free[k:]
            if not probes:  # too few partners for one probe of k: test with those there are
                s, _ = todo.pop(0)
                probes.append(Probe("retest", (s, *free)))
            self._queue.append(probes)
        return True

    # -- what came back ------------------------------------------------------------------------
    def record(self, results: list[Result]) -> list[Result]:
        """Judge a round's results (slow or not) and update verdicts; returns them judged."""
        peers: dict[str, list[float]] = {}
        for r in results:
            if r.status == "ok" and r.busbw:
                peers.setdefault(r.probe.phase, []).append(r.busbw)
        medians = {phase: statistics.median(v) for phase, v in peers.items() if len(v) >= MIN_PEERS}
        judged = [self._judge(r, medians) for r in results]
        oks = [r.busbw for r in judged if r.probe.phase == "pairs" and r.status == "ok" and r.busbw]
        if len(oks) >= MIN_PEERS:
            self._pair_median = statistics.median(oks)
        for r in judged:
            for n in r.probe.nodes:
                self.evidence[n].append(r)
            getattr(self, f"_after_{r.probe.phase}")(r)
        return judged

    def _judge(self, r: Result, medians: dict[str, float]) -> Result:
        if r.status != "ok":
            return r
        ref, factor = self._reference(r.probe.phase, medians)
        if ref is None or r.busbw is None:
            return r
        if r.busbw < factor * ref:
            return dataclasses.replace(r, status="slow", reference=ref,
                                       detail=f"{r.busbw:.4g} GB/s < {factor:.2f} x {ref:.4g} GB/s")
        return dataclasses.replace(r, reference=ref)

    def _reference(self, phase: str, medians: dict[str, float]) -> tuple[float | None, float]:
        """(reference, fraction of it a probe must reach): the expected value where known; else
        the round's median of its kind (the pairs' median for retests, the gate and bisections,
        which have no peers of their own)."""
        known = {"intra": self.reference.intra, "pairs": self.reference.pair, "retest": self.reference.pair,
                 "gate": self.reference.gate, "bisect": self.reference.gate}[phase]
        if known:
            return known, self.min_fraction
        factor = 1 - 2 * self.threshold if phase in ("gate", "bisect") else 1 - self.threshold
        if phase in ("gate", "bisect", "retest") and self._pair_median:
            return self._pair_median, factor
        return medians.get(phase), factor

    def _condemn(self, node: int, verdict: Verdict) -> None:
        self.verdicts.setdefault(node, verdict)
        self._good.discard(node)

    def _blame(self, r: Result) -> bool:
        """Named culprits (no answer to a ping, died, left) get their verdict; True if any."""
        for n in r.culprits:
            self._condemn(n, _VERDICT_OF[r.status])
        return bool(r.culprits)

    def _after_intra(self, r: Result) -> None:
        (node,) = r.probe.nodes
        if r.status == "slow":
            self._condemn(node, Verdict.SLOW)
        elif r.status != "ok":
            self._blame(r) or self._condemn(node, _VERDICT_OF[r.status])

    def _after_pairs(self, r: Result) -> None:
        if r.status == "ok":
            self._good.update(r.probe.nodes)
            return
        self._blame(r)
        self._suspects += [(n, 1) for n in r.probe.nodes if n not in self.verdicts]

    def _after_retest(self, r: Result) -> None:
        suspect = r.probe.nodes[0]
        if r.status == "ok":
            self._good.add(suspect)
        elif r.status == "slow":
            self._condemn(suspect, Verdict.SLOW)
        elif not self._blame(r):
            self._condemn(suspect, _VERDICT_OF[r.status])
        elif suspect not in r.culprits:  # a partner was the culprit: the suspect needs another one
            self._suspects.append((suspect, len(r.probe.nodes) - 1))

    def _after_gate(self, r: Result) -> None:
        if r.status == "ok":
            return
        self._gate_again = True
        if not self._blame(r):  # named culprits are out; the gate runs again without them
            self._bisect(tuple(n for n in r.probe.nodes if n not in self.verdicts))

    def _after_bisect(self, r: Result) -> None:
        if r.status != "ok" and not self._blame(r):
            self._bisect(tuple(n for n in r.probe.nodes if n not in self.verdicts))

    def _bisect(self, nodes: tuple[int, ...]) -> None:
        if len(nodes) <= 5:  # halves of two nodes could not show a fault of bigger groups
            self._suspects += [(n, 2) for n in nodes if n not in {s for s, _ in self._suspects}]
            self._phase = "bisect"
            return
        half = len(nodes) // 2
        self._queue.append([Probe("bisect", nodes[:half]), Probe("bisect", nodes[half:])])
        self._phase = "bisect"

    def summary(self) -> list[dict]:
        """A verdict per node with its evidence (phase, partners, status, busbw)."""
        return [{"node": i, "verdict": self.verdicts.get(i, Verdict.PASS).value,
                 "evidence": [{"phase": e.probe.phase, "group_id": e.group_id, "nodes": list(e.probe.nodes),
                               "status": e.status, "busbw_gbps": e.busbw, "reference_gbps": e.reference,
                               "detail": e.detail}
                              for e in self.evidence[i]]}
                for i in range(self.n_nodes)]


@dataclass
class Deadlines:
    """Per-phase deadlines from what probes took: a phase's stage deadline is `margin` times the
    longest probe of its kind so far (retests are pairs, bisections gates), at least `floor_s`
    and at most `ceiling_s` (--group-timeout), which also applies while a kind has not run yet."""

    ceiling_s: float
    floor_s: float = 10.0
    margin: float = 5.0
    _longest: dict[str, float] = field(default_factory=dict)

    KIND = {"intra": "intra", "pairs": "pairs", "retest": "pairs", "gate": "gate", "bisect": "gate"}

    def took(self, phase: str, wall_s: float) -> None:
        kind = self.KIND[phase]
        self._longest[kind] = max(self._longest.get(kind, 0.0), wall_s)

    def limit_s(self, phase: str) -> float:
        longest = self._longest.get(self.KIND[phase])
        if longest is None:
            return self.ceiling_s
        return min(self.ceiling_s, max(self.floor_s, self.margin * longest))


@dataclass
class Model:
    """A cluster for the simulator: a node's speed multiplies the busbw of every probe it is in
    (`slow`: the node itself; `nic_slow`: only probes that leave the node; `scale_slow`: only
    probes of more than two nodes); `hang` nodes stop every probe they are in (and do not answer
    a ping)."""

    n_nodes: int
    ranks_per_node: int = 8
    base_gbps: float = 40.0
    slow: dict[int, float] = field(default_factory=dict)
    nic_slow: dict[int, float] = field(default_factory=dict)
    hang: set[int] = field(default_factory=set)
    scale_slow: dict[int, float] = field(default_factory=dict)
    noise: float = 0.02
    seed: int = 0

    def run(self, probe: Probe, rng: random.Random) -> Result:
        stuck = tuple(n for n in probe.nodes if n in self.hang)
        if stuck:
            return Result(probe, "hang", None, stuck, "ranks did not answer")
        speed = min(self.slow.get(n, 1.0) for n in probe.nodes)
        if len(probe.nodes) > 1:
            speed = min([speed, *(self.nic_slow.get(n, 1.0) for n in probe.nodes)])
        if len(probe.nodes) > 2:
            speed = min([speed, *(self.scale_slow.get(n, 1.0) for n in probe.nodes)])
        return Result(probe, "ok", self.base_gbps * speed * (1 + rng.uniform(-self.noise, self.noise)))


def simulate(model: Model, threshold: float = 0.10, reference: Reference | None = None,
             min_fraction: float = 0.8) -> Qualifier:
    """Qualify the model's cluster; the returned qualifier holds verdicts and the rounds used."""
    q = Qualifier(model.n_nodes, model.ranks_per_node, threshold, reference or Reference(), model.seed, min_fraction)
    rng = random.Random(model.seed + 1)
    while probes := q.next_round():
        q.record([model.run(p, rng) for p in probes])
    return q
