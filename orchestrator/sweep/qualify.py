"""Qualify: localise slow, intermittent and hanging nodes in a few rounds, not N-1. Pure: it
proposes rounds of probes (groups of whole nodes) and reads their outcomes; `collbench qualify`
runs the probes on Ray, `benchmarks/qualify_simulator.py` runs them against a model of N nodes.

Rounds (each probe of a round runs at the same time, on disjoint nodes):
1. intra: every node alone (its ranks together), when nodes have more than one rank;
2. pairs: rounds of fresh pairs, no pair twice (the circle method over a shuffled order, inside
   each NVLink domain), `fresh_rounds(N)` of them: every node is looked at six times (a fault
   that shows in half of its probes is seen twice), and enough rounds that two healthy nodes meet
   where only two in five are healthy; every pair, at most (N-1 rounds, N when N is odd);
3. retests, in the same rounds: each suspect with a partner that proved fast (a node alone, where
   its slowness was its own); the nodes free of retests take their next fresh pair meanwhile;
4. gate: every node still passing, in one group (one per NVLink domain);
5. bisect: when the gate is slow or hangs without naming a culprit, its halves at the same time,
   then the failing halves' halves, down to five nodes or fewer, each of which is retested with
   two partners that proved fast (a fault that shows only in groups of more than two nodes);
   then the gate once more (also after a gate that named its culprits, without them).

Judging speed (qualify_judging.py `Judgement`, recomputed from every probe after each round, so an
earlier probe is judged again as better evidence comes). A group runs as fast as its slowest
member, so a fast probe proves every member fast, and the fabric's healthy level is what the
fastest agreeing probes of a kind delivered (judging/capacity.py), never the median, which is the
slow level when half the nodes are slow. Where an expected value is known, the level is it. A
probe is slow below the level's floor (the one judge's limit: the platform's prior pooled with
the healthy probes' own spread) and `threshold` below it; gates and bisections twice that, at
most 45%. With one probe of a kind and no expected value there is nothing to compare it with: its
speed is not judged, and `unjudged` says so.

Verdicts. A slow probe is a node's own where every other member proved fast elsewhere (or it ran
alone, or was a retest's suspect). A node slow in one probe of its own is measured again, and
named after two: `slow` where it was never fast in that class of probe (alone, pairs, groups of
three or more), `intermittent` where it was ("slow in k of m probes"); one slow probe among
`DISAGREEING_PROBES` of its own was noise. A node slow only with partners not yet proven is
retested with a partner that proved fast (a member at full speed is cleared). Slow only in groups
of three or more while fast in pairs, it is `slow` (a fault of scale). A hung or failed probe names its culprits when
some ranks did not answer a ping (stopped processes) or died; otherwise its members are retested,
and one that hangs again is named. A node that left the cluster is lost. Where no node is named
and nothing came slow, every node agrees: without an expected value the note says that this is all
that can be said ("all N nodes agree at X GB/s"), never a bare "healthy".

NVLink domains (`domains`, where nodes lie in two or more): pairs are matched, retested and gated
inside each domain, and a probe is judged against the level of its own span (inside one domain:
over NVLink; across: over the network), never one level over both.

Leaf switches (`leaves`, --topology): rounds of leaves first (qualify_pairing.leaf_rounds); pairs
judged inside a leaf or across ('leaf', 'spine'); a slow uplink (qualify_switches; `parents`, the
switches above leaves, too) is the switch's verdict: the probes across it are no node's evidence,
retests and gates keep off it."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import Enum

from orchestrator.judging.defaults import MIN_FRACTION, PEER_THRESHOLD
from orchestrator.judging.judge import PRIORS, Prior, allowed_drop
from orchestrator.sweep import qualify_switches
from orchestrator.sweep.qualify_judging import (
    DISAGREEING_PROBES,
    DISAGREEING_PROBES_DECISIVE,
    Cut,
    Judgement,
    NodeState,
)
from orchestrator.sweep.qualify_pairing import (
    LOOKS,
    circle_round,
    circle_rounds,
    fresh_rounds,
    leaf_rounds,
    plan_retests,
    span,
    take_pairs,
)
from orchestrator.sweep.qualify_types import UNJUDGED, Deadlines, Outcome, Phase, Probe, Reference, Result, Verdict

__all__ = ["DISAGREEING_PROBES", "UNJUDGED", "Cut", "Deadlines", "Outcome", "Phase", "Probe", "Qualifier", "Reference",
           "Result", "Verdict", "LOOKS", "circle_rounds", "fresh_rounds"]

_MAX_GATES = 3
class QualifyStep(Enum):
    """Where the qualification stands (what `_advance` plans next)."""

    START = "start"
    PAIRS = "pairs"  # fresh pairs and retests, until both are done
    GATES = "gates"  # gates and bisections, and the retests they raise
    DONE = "done"


@dataclass
class Qualifier:
    n_nodes: int
    ranks_per_node: int
    threshold: float = PEER_THRESHOLD
    reference: Reference = field(default_factory=Reference)
    seed: int = 0
    min_fraction: float = MIN_FRACTION  # of an expected value
    domains: tuple[str | None, ...] = ()  # each node's NVLink domain (None: none known); () without domain facts
    leaves: tuple[str | None, ...] = ()  # each node's leaf switch (--topology); () without a topology
    parents: dict[str, str] = field(default_factory=dict)  # switch -> the switch above it (deeper trees)
    prior: Prior = PRIORS[("gloo", True)]  # how far apart healthy probes can be (judging/judge.py)
    rounds: int = 0
    stopped: str | None = None  # why the rounds stopped before every node was settled
    verdicts: dict[int, Outcome] = field(default_factory=dict)
    evidence: dict[int, list[Result]] = field(default_factory=dict)
    unjudged: set[Phase] = field(default_factory=set)  # kinds of probe measured with nothing to judge them by
    uplinks: list[qualify_switches.SlowUplink] = field(default_factory=list)  # slow uplinks: switch verdicts
    _stage: QualifyStep = QualifyStep.START
    _results: list[Result] = field(default_factory=list)  # every probe's result, as measured
    _tentative: dict[int, Outcome] = field(default_factory=dict)  # verdicts the evidence gives now (final at the end)
    _why: dict[int, str] = field(default_factory=dict)  # what decided each of them
    _judgement: Judgement | None = None
    _fresh: int = 0  # rounds of fresh pairs planned
    _waiting: list[tuple[int, int]] = field(default_factory=list)  # fresh pairs not run yet (a node was busy)
    _bisect_suspects: set[int] = field(default_factory=set)  # nodes of a failing half, tested with two partners
    _gates: int = 0
    _gate_again: bool = True  # the first gate, and one after each failed gate (at most _MAX_GATES)
    _queue: list[list[Probe]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self.evidence = {i: [] for i in range(self.n_nodes)}
        for facts, what in ((self.domains, "NVLink domains"), (self.leaves, "leaf switches")):
            if facts and len(facts) != self.n_nodes:
                raise ValueError(f"{len(facts)} {what} for {self.n_nodes} nodes")
        # nodes by NVLink domain (nodes without one together), where nodes lie in two or more; else []
        known = {d for d in self.domains if d is not None}
        self._groups: list[list[int]] = []
        if known and len(set(self.domains)) > 1:
            self._groups = [[i for i, d in enumerate(self.domains) if d == key] for key in dict.fromkeys(self.domains)]
        self._group_of = {i: g for g, nodes in enumerate(self._groups) for i in nodes}
        # each domain's order for the circle method: its rounds give every pair once
        self._orders = [self._rng.sample(g, len(g)) for g in self._groups or [list(range(self.n_nodes))]]
        self._rounds_of_fresh = max((fresh_rounds(len(o)) for o in self._orders), default=0)
        # under leaf switches, the rounds of leaves before the fresh pairs (see the module's docstring)
        self._leaf_rounds = leaf_rounds(self.leaves, [] if self._groups else qualify_switches.sides(
            self.leaves, [], range(self.n_nodes), True), self._rng)
        self._loading, self._loaded_ids, self._loaded = set(), set(), set()  # rounds across: pairs, probes, results
        self._rounds_of_fresh += len(self._leaf_rounds)
        # a bound no qualification should meet: fresh rounds, a node's own probes in each class, bisections
        self.max_rounds = 2 * (self._rounds_of_fresh + 3 * DISAGREEING_PROBES_DECISIVE) + 2 * max(
            1, self.n_nodes).bit_length() + _MAX_GATES * 2

    # -- what to run next -------------------------------------------------------------------
    def next_round(self) -> list[Probe]:
        """The next round's probes; [] when every node has its verdict (or at `max_rounds`, with
        what the evidence gives then, said)."""
        if self.rounds >= self.max_rounds and self._stage is not QualifyStep.DONE:
            self._stage = QualifyStep.DONE
            self._finish(self._assess())
            self.stopped = f"stopped after {self.rounds} rounds (the most for {self.n_nodes} nodes)"
            return []
        while True:
            while self._queue:
                probes = [p for p in self._queue.pop(0) if not any(self._dropped(n, p) for n in p.nodes)]
                if probes:
                    self.rounds += 1
                    return probes
            if not self._advance():
                return []

    def _advance(self) -> bool:
        """Plan the next round; False when the qualification is over."""
        if self._stage is QualifyStep.DONE:  # finished, or stopped
            return False
        if self._stage is QualifyStep.START:
            self._stage = QualifyStep.PAIRS
            if self.ranks_per_node > 1 and self._open():
                self._queue.append([Probe(Phase.INTRA, (i,)) for i in self._open()])
                return True
        state = self._assess()
        whole = self._stage is QualifyStep.PAIRS and self._fresh < len(self._leaf_rounds)  # leaves' rounds: whole
        retests = [] if whole else self._confirmations() + plan_retests(state, self._out, lambda n, p: (
            self._same_domain(p, n) and not (self.uplinks and self._on_uplink(Probe(Phase.RETEST, (n, p))))))
        busy = {n for p in retests for n in p.nodes}
        fresh = []
        if self._stage is QualifyStep.PAIRS and (self._fresh < self._rounds_of_fresh or self._waiting):
            fresh = self._fresh_pairs(busy)
            self._fresh += 1
        if retests or fresh:
            self._queue.append(retests + fresh)
            return True
        if self._stage is QualifyStep.PAIRS and (self._fresh < self._rounds_of_fresh or self._waiting) \
                and len(self._open()) > 1:
            return self._advance()  # a round whose fresh pairs were all taken: the next one
        self._stage = QualifyStep.GATES
        open_ = set(self._open())
        gates = [Probe(Phase.GATE, members) for group in self._groups or qualify_switches.sides(  # a gate per
                 self.leaves, self.uplinks, range(self.n_nodes))  # domain, per side of a slow uplink
                 if len(members := tuple(sorted(open_.intersection(group)))) > 2]
        if self._gate_again and self._gates < _MAX_GATES and gates:
            self._gates, self._gate_again = self._gates + 1, False
            self._queue.append(gates)
            return True
        self._stage = QualifyStep.DONE
        self._finish(state)
        return False

    def _open(self) -> list[int]:
        return [i for i in range(self.n_nodes) if not self._out(i)]

    def _out(self, node: int) -> bool:
        """Named, or named by the evidence so far: no longer probed."""
        return node in self.verdicts or node in self._tentative

    def _confirmations(self) -> list[Probe]:
        """Pairs that ran far faster than the level and were measured fewer than three times: again
        (a level of their own, or noise; judging/capacity.py)."""
        if self._judgement is None:
            return []
        probes, busy = [], set()
        for nodes in self._judgement.unconfirmed():
            if not busy.intersection(nodes) and not any(self._out(n) for n in nodes):
                probes.append(Probe(Phase.PAIRS, nodes))
                busy |= set(nodes)
        return probes

    def _fresh_pairs(self, busy: set[int]) -> list[Probe]:
        """The next circle round of each domain's order, and pairs of earlier ones that waited, less
        pairs with a busy node (they wait) or one hung or failed (`_stuck`). A node the
        evidence names slow so far stays in its fresh pairs: they cost no round, and a fast one
        tells a flapping node from a steadily slow one."""
        if self._fresh < self._rounds_of_fresh:
            k = self._fresh - len(self._leaf_rounds)  # the rounds of leaves first, whole, where there are any
            self._waiting = self._leaf_rounds[self._fresh] + self._waiting if k < 0 else self._waiting + [
                pair for order in self._orders for pair in circle_round(order, k)]
            self._loading = set(self._leaf_rounds[self._fresh]) if k < 0 and self._fresh > 0 else set()
        out, self._waiting = take_pairs(self._waiting, busy, self._stuck)
        self._loaded_ids |= {id(p) for p in out if p.nodes in self._loading}
        return out

    def _dropped(self, node: int, probe: Probe) -> bool:
        """A planned probe no longer runs with this node: named, but slow or flapping so far in a fresh pair."""
        return self._stuck(node) or (self._out(node) and probe.phase is not Phase.PAIRS)

    def _stuck(self, node: int) -> bool:
        """Named for good, or hung or failed so far: a probe with it would wait for its deadline."""
        return node in self.verdicts or self._tentative.get(node) in (Outcome.HANG, Outcome.FAILED, Outcome.LOST)

    def _same_domain(self, a: int, b: int) -> bool:
        return self._group_of.get(a) == self._group_of.get(b)

    def _on_uplink(self, probe: Probe) -> bool:
        """Whether a probe crosses a slow uplink: its evidence, no node's (qualify_switches)."""
        return any(u.crosses(self.leaves, probe) for u in self.uplinks)

    def _span(self, probe: Probe) -> str | None:
        return span(probe.nodes, self.domains if self._groups else (), self.leaves)

    # -- what came back ------------------------------------------------------------------------
    def record(self, results: list[Result]) -> list[Result]:
        """Take a round's results; returns them judged (slow or not) against every probe so far."""
        for r in results:
            if id(r.probe) in self._loaded_ids:
                self._loaded.add(len(self._results))
            self._results.append(r)
            self._blame(r)
        self._judgement = Judgement(self._results, self.reference, self.prior, self.threshold, self.min_fraction,
                                    self._span)
        if any(self.leaves):  # the probes across a slow uplink are its evidence, no node's (nor a level's)
            self.uplinks = qualify_switches.find(self._judgement.all_judged(), self.leaves, self.threshold,
                                                 self._loaded, self.parents)
            self._judgement = Judgement(self._results, self.reference, self.prior, self.threshold,
                                        self.min_fraction, self._span, self._on_uplink)
        judged = [self._judgement.judged(r) for r in results]
        for r in judged:
            if r.status is not Outcome.PASS and r.probe.phase is Phase.GATE:
                self._gate_again = True  # named culprits are out; the gate runs again without them
            if r.status is not Outcome.PASS and r.probe.phase.kind is Phase.GATE and not r.culprits:
                self._bisect(tuple(n for n in r.probe.nodes if not self._out(n)))
        self._assess()
        return judged

    def cut(self, phase: Phase, span: str | None = None) -> Cut | None:
        """What a probe of this phase (and span, where nodes have NVLink domains: _span) is judged against."""
        if self._judgement is None:
            known = self.reference.of(phase)
            return Cut(known, self.min_fraction) if known else None
        return self._judgement.cut(phase, span)

    def _assess(self) -> dict[int, NodeState]:
        """Every open node's state from every probe so far; verdicts where the evidence decides."""
        if self._judgement is None:
            return {}
        judged = self._judgement.all_judged()
        self.evidence = {i: [] for i in range(self.n_nodes)}
        for r in judged:
            for n in r.probe.nodes:
                self.evidence[n].append(r)
        state = self._judgement.states(self.n_nodes, self.verdicts, self._bisect_suspects)
        self._tentative = {node: s.verdict for node, s in state.items()
                           if node not in self.verdicts and s.verdict not in (None, Outcome.PASS)}
        self._why = {**{n: w for n, w in self._why.items() if n in self.verdicts},
                     **{node: state[node].why for node in self._tentative}}
        return state

    def _finish(self, state: dict[int, NodeState]) -> None:
        """Every node left open passes, but one that could never be measured with a partner that
        proved fast after a slow, hung or failed probe: it is named with that outcome (no node
        could tell it apart from its partners, who are named too); a speed that nothing could
        judge is said."""
        if self._judgement is not None:
            self.unjudged |= self._judgement.unjudged_kinds()
            for node, s in state.items():
                if self._out(node) or not s.unresolved:
                    continue
                bad = [e for e in self.evidence[node] if e.status is not Outcome.PASS and not e.culprits
                       and e.probe.phase.kind is not Phase.GATE and not self._on_uplink(e.probe)]
                if bad:
                    self._tentative[node] = bad[-1].status
                    self._why[node] = (f"{bad[-1].status.value} with partners that never proved fast: no node "
                                       "could tell it apart from them")
                elif self.n_nodes > 1:  # one node has no pair to judge: its own probes say what was unjudged
                    self.unjudged.add(Phase.PAIRS)
        for i in range(self.n_nodes):
            self.verdicts.setdefault(i, self._tentative.get(i, Outcome.PASS))

    def stop(self, why: str, unrun: list[Probe] | None = None) -> list[int]:
        """End early (`why`: SIGUSR1; `unrun`: a proposed round not run) with the verdicts the evidence gives
        now, as at `max_rounds`; the nodes it does not name, returned, are unsettled, not passed."""
        self._assess()
        self.rounds -= bool(unrun)
        self._stage, self.stopped, self._queue = QualifyStep.DONE, f"stopped after {self.rounds} rounds ({why})", []
        self.unjudged |= self._judgement.unjudged_kinds() if self._judgement else set()
        self.verdicts = {**self._tentative, **self.verdicts}
        return [i for i in range(self.n_nodes) if i not in self.verdicts]

    # -- verdicts ------------------------------------------------------------------------------
    def _condemn(self, node: int, verdict: Outcome) -> None:
        self.verdicts.setdefault(node, verdict)

    def _blame(self, r: Result) -> None:
        """Named culprits (no answer to a ping, died, left) get their verdict."""
        for n in r.culprits:
            self._condemn(n, r.status)
            self._why.setdefault(n, f"{r.status.value} in a {r.probe.phase.value} probe: "
                                    + ("left the cluster" if r.status is Outcome.LOST else "its ranks did not answer"
                                       if r.status is Outcome.HANG else r.detail or "a rank failed"))

    def _bisect(self, nodes: tuple[int, ...]) -> None:
        if len(nodes) <= 5:  # halves of two nodes could not show a fault of bigger groups
            self._bisect_suspects |= set(nodes)
            return
        half = len(nodes) // 2
        self._queue.append([Probe(Phase.BISECT, nodes[:half]), Probe(Phase.BISECT, nodes[half:])])

    # -- the report ----------------------------------------------------------------------------
    def named(self) -> int:
        """Nodes named so far (the evidence's verdicts, which later rounds can revise, included)."""
        return sum(1 for i in range(self.n_nodes) if self._out(i) and self.verdicts.get(i) is not Outcome.PASS)

    def agreement(self) -> str | None:
        """Where nothing was slow and no expected value was known: what can and cannot be said."""
        j = self._judgement
        level = None if j is None or self.reference.pair or self.uplinks or any(
            v is not Outcome.PASS for v in self.verdicts.values()) else next(
            filter(None, (j.level(Phase.PAIRS, s) for s in (None, "intra", "leaf", "spine"))), None)
        if level is None:
            return None
        if level.below:  # a slower mode apart from the level, yet every node passed: not agreement
            return (f"cannot tell which nodes are slow: {level.below} of {level.rates} pair probes form a slower mode "
                    f"apart from the level of the fastest ({level.reference:.4g} GB/s), but no node's own probes "
                    "fall below its noise floor; qualify again with more iterations (-n) or declare an expected "
                    "value with --expected (docs/guides/expected.md)")
        # every node passed: a probe that did not was noise its retests cleared, and is said so
        cleared = " (the probes that did not pass were cleared by their retests)" if any(
            r.status is not Outcome.PASS for r in j.all_judged()) else ""
        unresolved = allowed_drop(level.floor, self.threshold)
        return (f"all {self.n_nodes} nodes agree at {level.reference:.4g} GB/s{cleared}, to the resolution of "
                f"{level.rates} pair probes (a node less than {unresolved:.0%} slower is not told apart); no expected "
                "value covers this platform: declare one with --expected (docs/guides/expected.md) to tell a healthy "
                "fabric from one equally slow everywhere")

    def _unjudged_pass(self, node: int) -> bool:
        mine = self.evidence.get(node, [])
        return self.verdicts.get(node, Outcome.PASS) is Outcome.PASS and bool(mine) and all(
            e.status is Outcome.PASS and e.reference is None for e in mine)

    def unjudged_note(self) -> str | None:
        """Why some speed was not judged, or None when every probe had a reference."""
        notes = [f"{self.stopped}: the verdicts are what the evidence gave then"] if self.stopped else []
        if self.unjudged:
            kinds = " and ".join(sorted(k.value for k in self.unjudged))
            notes.append(f"the speed of some {kinds} probes was not judged: without an expected value a probe needs "
                         "another of its kind to compare with, and a node whose only partners failed cannot be told "
                         "apart; give --expected (docs/guides/expected.md); those verdicts say only that it completed")
        return "; ".join(notes) or None

    def summary(self) -> list[dict]:
        """A verdict per node with its evidence (phase, partners, status, busbw); a node that passed
        without any probe of it judged for speed says so (it completed, nothing more is known)."""
        return [{"node": i, "verdict": self.verdicts.get(i, Outcome.PASS).value, "detail": self._why.get(i, "")
                 or (UNJUDGED if self._unjudged_pass(i) else ""),
                 "evidence": [{"phase": e.probe.phase.value, "group_id": e.group_id, "nodes": list(e.probe.nodes),
                               "status": e.status.value, "busbw_gbps": e.busbw, "reference_gbps": e.reference,
                               "detail": e.detail}
                              for e in self.evidence[i]]}
                for i in range(self.n_nodes)]

