"""Qualify: localise slow and hanging nodes in a few rounds, not N-1. Pure: it proposes rounds of
probes (groups of whole nodes) and reads their outcomes; `collbench qualify` runs the probes on
Ray, `benchmarks/qualify_simulator.py` runs them against a model of N nodes.

Size: over 300 lines for one state machine of rounds (intra, pairs, retests, gates, bisections,
verdicts); its judging is qualify_judging.py, its vocabulary qualify_types.py.

Rounds (each probe of a round runs at the same time, on disjoint nodes):
1. intra: every node alone (its ranks together), when nodes have more than one rank;
2. pairs: a random perfect matching of the nodes not yet condemned; with 3 to 5 nodes and no
   expected value, every pair instead (circle method: N-1 rounds, N when N is odd), since a
   median of one or two pairs cannot say which is off;
3. retest: each member of a slow, failed or hung pair (and a node left out of an odd matching)
   with a partner that already passed, all at once: a member at full speed is cleared (the
   other was the culprit, or the pair's own path was slow); one that hangs again is named;
4. gate: every node still passing, in one group;
5. bisect: when the gate is slow or hangs without naming a culprit, its halves at the same time,
   then the failing halves' halves, down to five nodes or fewer, each of which is retested with
   two good partners (a fault that shows only in groups of more than two nodes is found too);
   then the gate once more (also after a gate that named its culprits, without them).

Judging speed. A probe is slow below `min_fraction` of the expected value for its kind where one
is known (so one bad node is caught even when most of the cluster is bad). Otherwise the
reference is the median of the round's probes of its kind (all of them, slow ones included: the
same median judges them and carries to retests, gates and bisections), and a probe is slow
`threshold` below it, or further when the round's own spread says the measurements are noisier
(3 robust standard deviations of its log, from the one judge's estimate, at most 25%); gates and
bisections twice that, at most 45%. With
3 to 5 nodes the reference is the median over nodes of each node's best pair, and a node is named
when it is slow in its pairs with every other node. With 2 nodes (or 2 intra probes) and no
expected value there is no reference: the speed is not judged, and `unjudged` says so.

Condemning. A node measured slow once is measured again before it is named: a retest far below
its reference (more than twice the allowed drop) names it; one closer to the line names it only
with a second slow measurement of its own (its pair, when its partner was cleared, or a second
retest). A retest at full speed clears it. A hung or failed probe names its culprits when some
ranks did not answer a ping (stopped processes) or died; otherwise its members are retested.
A node that left the cluster is lost.

NVLink domains (`domains`, where nodes lie in two or more): pairs are matched, retested and gated
inside each domain, and a probe is judged against a cut of its own span (inside one domain: over
NVLink; across: over the network), never one median over both.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from enum import Enum

from orchestrator.sweep.qualify_judging import (
    ALL_PAIRS_NODES,
    MAX_GATE_DROP,
    MIN_PEERS,
    Cut,
    circle_rounds,
    median_cut,
    node_pair_cut,
)
from orchestrator.sweep.qualify_types import Deadlines, Outcome, Phase, Probe, Reference, Result, Verdict

__all__ = ["ALL_PAIRS_NODES", "Cut", "Deadlines", "Outcome", "Phase", "Probe", "Qualifier", "Reference", "Result",
           "Verdict", "circle_rounds"]

_MAX_GATES = 3


class QualifyStep(Enum):
    """Where the qualification stands (what `_advance` plans next)."""

    START = "start"
    INTRA = "intra"
    PAIRS = "pairs"
    CHECKS = "checks"  # retests, gates and bisections, until nothing is left to check
    DONE = "done"


@dataclass
class Qualifier:
    n_nodes: int
    ranks_per_node: int
    threshold: float = 0.10
    reference: Reference = field(default_factory=Reference)
    seed: int = 0
    min_fraction: float = 0.8  # of an expected value
    domains: tuple[str | None, ...] = ()  # each node's NVLink domain (None: none known); () without domain facts
    rounds: int = 0
    verdicts: dict[int, Outcome] = field(default_factory=dict)
    evidence: dict[int, list[Result]] = field(default_factory=dict)
    unjudged: set[Phase] = field(default_factory=set)  # kinds of probe measured with nothing to judge them by
    _stage: QualifyStep = QualifyStep.START
    _good: set[int] = field(default_factory=set)
    _suspects: list[tuple[int, int]] = field(default_factory=list)  # (node, good partners to test it with)
    _recheck: list[tuple[int, int]] = field(default_factory=list)  # slow once, near the line: measure again
    _own_slow: dict[int, int] = field(default_factory=dict)  # slow measurements no partner explains
    _cuts: dict[tuple[Phase, str | None], Cut | None] = field(default_factory=dict)  # by kind and span (_span)
    _measured: dict[tuple[Phase, str | None], list[Result]] = field(default_factory=dict)  # what a cut is drawn from
    _all_pairs: list[Result] | None = None  # every pair so far, when 3-5 nodes are judged by all pairs
    _gates: int = 0
    _gate_again: bool = True  # the first gate, and one after each failed gate (at most _MAX_GATES)
    _queue: list[list[Probe]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self.evidence = {i: [] for i in range(self.n_nodes)}
        if self.domains and len(self.domains) != self.n_nodes:
            raise ValueError(f"{len(self.domains)} NVLink domains for {self.n_nodes} nodes")
        # nodes by NVLink domain (nodes without one together), where nodes lie in two or more; else []
        known = {d for d in self.domains if d is not None}
        self._groups: list[list[int]] = []
        if known and len(set(self.domains)) > 1:
            order = list(dict.fromkeys(self.domains))
            self._groups = [[i for i, d in enumerate(self.domains) if d == key] for key in order]
        self._group_of = {i: g for g, nodes in enumerate(self._groups) for i in nodes}
        self._after = {Phase.INTRA: self._after_intra, Phase.PAIRS: self._after_pairs,
                       Phase.RETEST: self._after_retest, Phase.GATE: self._after_gate, Phase.BISECT: self._after_bisect}

    # -- what to run next -------------------------------------------------------------------
    def next_round(self) -> list[Probe]:
        """The next round's probes; [] when every node has its verdict."""
        while True:
            while self._queue:
                probes = self._runnable(self._queue.pop(0))
                if probes:
                    self.rounds += 1
                    return probes
            if not self._advance():
                return []

    def _runnable(self, probes: list[Probe]) -> list[Probe]:
        """Probes planned ahead lose those with a node named since; their open suspects wait for the next."""
        out = []
        for p in probes:
            if not any(n in self.verdicts for n in p.nodes):
                out.append(p)
            elif p.phase is Phase.RETEST and p.nodes[0] not in self.verdicts:
                self._suspects.append((p.nodes[0], len(p.nodes) - 1))
        return out

    def _advance(self) -> bool:
        """Plan the next step; False when the qualification is over."""
        alive = self._open()
        if self._stage is QualifyStep.START:
            self._stage = QualifyStep.INTRA
            if self.ranks_per_node > 1 and alive:
                self._queue.append([Probe(Phase.INTRA, (i,)) for i in alive])
                return True
        if self._stage is QualifyStep.INTRA:
            self._stage = QualifyStep.PAIRS
            if self._plan_pairs(alive):
                return True
        if self._stage in (QualifyStep.PAIRS, QualifyStep.CHECKS):
            self._stage = QualifyStep.CHECKS
            if self._suspects:
                return self._plan_retests()
            open_ = set(self._open())
            gates = [Probe(Phase.GATE, members) for group in self._groups or [range(self.n_nodes)]
                     if len(members := tuple(sorted(open_.intersection(group)))) > 2]  # a gate per domain
            if self._gate_again and self._gates < _MAX_GATES and gates:
                self._gates, self._gate_again = self._gates + 1, False
                self._queue.append(gates)
                return True
        self._stage = QualifyStep.DONE
        for i in range(self.n_nodes):
            self.verdicts.setdefault(i, Outcome.PASS)
        return False

    def _plan_pairs(self, alive: list[int]) -> bool:
        if len(alive) in ALL_PAIRS_NODES and not self.reference.pair and not self._groups:
            self._all_pairs = []
            self._queue += circle_rounds(alive)
            return True
        pairs = []
        for group in [[n for n in g if n in alive] for g in self._groups] or [alive]:  # pairs within a domain
            self._rng.shuffle(group)
            pairs += [Probe(Phase.PAIRS, (a, b)) for a, b in zip(group[::2], group[1::2])]
            if len(group) % 2 and len(alive) > 1:
                self._suspects.append((group[-1], 1))  # left out: tested against a good partner
        if pairs:
            self._queue.append(pairs)
        return bool(pairs)

    def _open(self) -> list[int]:
        return [i for i in range(self.n_nodes) if i not in self.verdicts]

    def _plan_retests(self) -> bool:
        """Suspects with their own good partners, as many at once as the partners allow; the rest
        wait for the next round (partners named meanwhile are not used)."""
        partners = sorted(self._good - {s for s, _ in self._suspects})
        if (not partners and any(k for _, k in self._suspects) and 2 <= len(self._open()) <= max(ALL_PAIRS_NODES)
                and not self._groups):
            self._suspects = [(s, k) for s, k in self._suspects if k == 0]  # slow alone: named or cleared alone
            self._all_pairs = []  # nobody known good among 3-5 nodes: every pair tells them apart
            self._queue += circle_rounds(self._open())
            return True
        todo, self._suspects = self._suspects, []
        probes, free = [], list(partners)
        for s, k in todo:
            mine = [p for p in free if self._same_domain(p, s)]  # partners of its own domain, where known
            if k == 0:  # slow alone, near the line: alone again
                probes.append(Probe(Phase.INTRA, (s,)))
            elif not any(self._same_domain(p, s) for p in partners):  # nobody known good: cannot be told apart
                self._last_word(s)
            elif len(mine) >= k or not any(p.phase is Phase.RETEST and self._same_domain(p.nodes[0], s)
                                           for p in probes):
                probes.append(Probe(Phase.RETEST, (s, *mine[:k])))  # too few partners for the first: those there are
                free = [p for p in free if p not in mine[:k]]
            else:
                self._suspects.append((s, k))
        if probes:
            self._queue.append(probes)
        return True

    def _same_domain(self, a: int, b: int) -> bool:
        return self._group_of.get(a) == self._group_of.get(b)

    def _span(self, probe: Probe) -> str | None:
        """Where nodes lie in NVLink domains, whether a probe of nodes runs inside one ('intra': over
        NVLink) or across ('cross': over the network), judged only against its own span; else None."""
        if not self._groups or len(probe.nodes) < 2:
            return None
        domains = {self.domains[n] for n in probe.nodes}
        return "intra" if len(domains) == 1 and None not in domains else "cross"

    def _key(self, probe: Probe) -> tuple[Phase, str | None]:
        return probe.phase.kind, self._span(probe)

    # -- what came back ------------------------------------------------------------------------
    def record(self, results: list[Result]) -> list[Result]:
        """Judge a round's results (slow or not) and update verdicts; returns them judged (an
        all-pairs round before the last: as measured, judged with the last)."""
        if self._all_pairs is not None and results and results[0].probe.phase is Phase.PAIRS:
            self._all_pairs += results
            for r in results:
                if r.status is not Outcome.PASS:
                    self._blame(r)  # a node that stopped is not waited for in the rounds left
            self._queue = [rnd for rnd in map(self._runnable, self._queue) if rnd]
            if self._queue:
                return results
            results, self._all_pairs = self._all_pairs, None
            self._cuts[Phase.PAIRS, None] = node_pair_cut(results, self.threshold) if not self.reference.pair else None
            judged = [self._judge(r) for r in results]
            self._file(judged)
            self._after_all_pairs(judged)
            return judged
        spans = ("intra", "cross") if self._groups else (None,)
        for key in [(Phase.INTRA, None), *((Phase.PAIRS, s) for s in spans)]:
            if self._cuts.get(key) is None:  # set once; until then (a round of hangs) later probes of the kind count
                earlier = self._measured.setdefault(key, [])
                mine = [r for r in results if self._key(r.probe) == key]
                self._cuts[key] = self._round_cut(key[0], earlier + mine)
                if self._cuts[key] is not None:
                    self._rejudge(key, earlier)
                earlier.extend(mine)
        judged = [self._judge(r) for r in results]
        self._file(judged)
        for r in judged:
            self._after[r.probe.phase](r)
        self._resolve_rechecks()
        return judged

    def _rejudge(self, key: tuple[Phase, str | None], earlier: list[Result]) -> None:
        """Probes measured before their kind had a reference (a round of hangs left too few to
        compare) are judged now that it has one; a slow one makes its members suspects again."""
        kind = key[0]
        if all(self._cuts.get(k) is not None for k in self._measured if k[0] is kind):
            self.unjudged.discard(kind)
        for r in earlier:
            j = self._judge(r)
            if j is r:
                continue
            for n in r.probe.nodes:
                self.evidence[n] = [j if e is r else e for e in self.evidence[n]]
                if j.status is Outcome.SLOW and n not in self.verdicts:
                    self._good.discard(n)
                    self._suspects.append((n, 0 if kind is Phase.INTRA else 1))

    def _file(self, judged: list[Result]) -> None:
        for r in judged:
            for n in r.probe.nodes:
                self.evidence[n].append(r)

    def _round_cut(self, kind: Phase, results: list[Result]) -> Cut | None:
        """The expected value where known; else the median of all the round's probes of its kind."""
        known = self.reference.of(kind)
        if known:
            return Cut(known, self.min_fraction)
        return median_cut([r.busbw for r in results if r.status is Outcome.PASS and r.busbw is not None],
                          self.threshold)

    def cut(self, phase: Phase, span: str | None = None) -> Cut | None:
        """What a probe of this phase (and span, where nodes have NVLink domains: _span) is judged against."""
        known = self.reference.of(phase)
        if known:
            return Cut(known, self.min_fraction)
        if phase.kind is Phase.INTRA:
            return self._cuts.get((Phase.INTRA, None))
        if phase.kind is Phase.PAIRS:
            return self._cuts.get((Phase.PAIRS, span))
        pairs = self._cuts.get((Phase.PAIRS, span))
        if pairs is None:
            return None
        return Cut(pairs.reference_gbps, 1 - min(2 * (1 - pairs.fraction), MAX_GATE_DROP))

    def _judge(self, r: Result) -> Result:
        if r.status is not Outcome.PASS:
            return r
        cut = self.cut(r.probe.phase, self._span(r.probe))
        if cut is None:
            self.unjudged.add(r.probe.phase.kind)
            return r
        if cut.slow(r.busbw):
            return dataclasses.replace(
                r, status=Outcome.SLOW, reference=cut.reference_gbps,
                detail=f"{r.busbw:.4g} GB/s < {cut.fraction:.2f} x {cut.reference_gbps:.4g} GB/s")
        return dataclasses.replace(r, reference=cut.reference_gbps)

    # -- verdicts ------------------------------------------------------------------------------
    def _condemn(self, node: int, verdict: Outcome) -> None:
        self.verdicts.setdefault(node, verdict)
        self._good.discard(node)

    def _last_word(self, node: int) -> None:
        """A suspect that cannot be retested: named with what its own probes showed (not those
        blamed on a named partner); with nothing of its own against it, it passes, unjudged."""
        bad = [e.status for e in self.evidence[node] if e.status is not Outcome.PASS and set(e.culprits) <= {node}]
        if bad:
            self._condemn(node, bad[-1])
        else:
            self.unjudged.add(Phase.PAIRS)

    def _blame(self, r: Result) -> bool:
        """Named culprits (no answer to a ping, died, left) get their verdict; True if any."""
        for n in r.culprits:
            self._condemn(n, r.status)
        return bool(r.culprits)

    def _slow_once(self, node: int, r: Result, partners: int) -> None:
        """A slow measurement of the node's own: named when far below the line or slow before;
        else measured again (unless a cleared partner makes its pair a second measurement)."""
        self._own_slow[node] = self._own_slow.get(node, 0) + 1
        cut = self.cut(r.probe.phase, self._span(r.probe))
        if self._own_slow[node] >= 2 or (cut and r.busbw is not None and cut.decisive(r.busbw)):
            self._condemn(node, Outcome.SLOW)
        else:
            self._recheck.append((node, partners))

    def _resolve_rechecks(self) -> None:
        todo, self._recheck = self._recheck, []
        for node, partners in todo:
            if node in self.verdicts:
                continue
            if any(e.probe.phase is Phase.PAIRS and e.status is Outcome.SLOW
                   and all(n in self._good for n in e.probe.nodes if n != node) for e in self.evidence[node]):
                self._condemn(node, Outcome.SLOW)  # its pair was slow with a partner cleared since
            else:
                self._suspects.append((node, partners))

    def _after_intra(self, r: Result) -> None:
        (node,) = r.probe.nodes
        if r.status is Outcome.SLOW:
            self._slow_once(node, r, 0)
        elif r.status is not Outcome.PASS:
            self._blame(r) or self._condemn(node, r.status)

    def _after_pairs(self, r: Result) -> None:
        if r.status is Outcome.PASS:
            self._good.update(r.probe.nodes)
            return
        self._blame(r)
        self._suspects += [(n, 1) for n in r.probe.nodes if n not in self.verdicts]

    def _after_all_pairs(self, judged: list[Result]) -> None:
        """A node is named when none of its own pairs (those not blamed on a named partner) passed;
        slow in all of them but none far below the line, it is retested with a partner that passed."""
        for r in judged:
            if r.status not in (Outcome.PASS, Outcome.SLOW):
                self._blame(r)
        for n in self._open():
            mine = [r for r in judged if n in r.probe.nodes and set(r.culprits) <= {n}]
            if not mine:
                continue
            if any(r.status is Outcome.PASS for r in mine):
                self._good.add(n)
                continue
            statuses = {r.status for r in mine}
            if statuses != {Outcome.SLOW}:
                self._condemn(n, (statuses - {Outcome.SLOW}).pop())
            elif all(self.cut(Phase.PAIRS).decisive(r.busbw) for r in mine):
                self._condemn(n, Outcome.SLOW)
            else:
                self._own_slow[n] = 1
                self._suspects.append((n, 1))

    def _after_retest(self, r: Result) -> None:
        suspect = r.probe.nodes[0]
        if r.status is Outcome.PASS:
            self._good.add(suspect)
        elif r.status is Outcome.SLOW:
            self._slow_once(suspect, r, len(r.probe.nodes) - 1)
        elif not self._blame(r):
            self._condemn(suspect, r.status)
        elif suspect not in r.culprits:  # a partner was the culprit: the suspect needs another one
            self._suspects.append((suspect, len(r.probe.nodes) - 1))

    def _after_gate(self, r: Result) -> None:
        if r.status is Outcome.PASS:
            return
        self._gate_again = True
        if not self._blame(r):  # named culprits are out; the gate runs again without them
            self._bisect(tuple(n for n in r.probe.nodes if n not in self.verdicts))

    def _after_bisect(self, r: Result) -> None:
        if r.status is not Outcome.PASS and not self._blame(r):
            self._bisect(tuple(n for n in r.probe.nodes if n not in self.verdicts))

    def _bisect(self, nodes: tuple[int, ...]) -> None:
        if len(nodes) <= 5:  # halves of two nodes could not show a fault of bigger groups
            self._suspects += [(n, 2) for n in nodes if n not in {s for s, _ in self._suspects}]
            return
        half = len(nodes) // 2
        self._queue.append([Probe(Phase.BISECT, nodes[:half]), Probe(Phase.BISECT, nodes[half:])])

    # -- the report ----------------------------------------------------------------------------
    @property
    def all_pairs_pending(self) -> bool:
        """Pairs measured in every-pair rounds wait for the last of them to be judged."""
        return self._all_pairs is not None

    def unjudged_note(self) -> str | None:
        """Why some speed was not judged, or None when every probe had a reference."""
        if not self.unjudged:
            return None
        kinds = " and ".join(sorted(k.value for k in self.unjudged))
        return (f"the speed of some {kinds} probes was not judged: without an expected value a probe needs "
                f"{MIN_PEERS} or more of its kind to compare with, and a node whose only partner failed cannot be "
                f"told apart; give --expected (README: Expected values); those verdicts say only that it completed")

    def summary(self) -> list[dict]:
        """A verdict per node with its evidence (phase, partners, status, busbw)."""
        return [{"node": i, "verdict": self.verdicts.get(i, Outcome.PASS).value,
                 "evidence": [{"phase": e.probe.phase.value, "group_id": e.group_id, "nodes": list(e.probe.nodes),
                               "status": e.status.value, "busbw_gbps": e.busbw, "reference_gbps": e.reference,
                               "detail": e.detail}
                              for e in self.evidence[i]]}
                for i in range(self.n_nodes)]
