"""How qualify judges its probes and its nodes, from every probe so far. Pure.

A probe's speed is judged against the healthy level of its kind (judging/capacity.py: what the
fastest agreeing probes delivered, under the bottleneck rule: a group runs as fast as its slowest
member), or an expected value where one is known (`Cut`). A node's state is read from its probes:
- a fast probe proves each of its members fast (nobody in it held it back);
- a slow pair is its member's own where the other member proved fast (where both did, not the
  member's whose own probes read slow less often than the other's); a slow retest is its
  suspect's (its partners proved fast when it was planned); a node alone is its own; a slow gate
  or bisection is nobody's own (its halves are measured instead);
- within one class of probe (alone, pairs, groups of three or more), a node slow in two probes of
  its own is `slow` where it was never fast, `intermittent` where it was fast too (one slow probe
  is measured again: a second look tells a steady fault from one that comes and goes); one slow
  among DISAGREEING_PROBES of its own was noise (DISAGREEING_PROBES_DECISIVE where it was
  decisively slow, beyond any noise the level saw);
- a slow or hung probe that is not its own, and a node never measured with others, need a
  measurement with partners that proved fast (a node that proved fast itself needs none for it).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from orchestrator.judging.capacity import Level, healthy_level
from orchestrator.judging.judge import MIN_VALUES, Prior, allowed_drop
from orchestrator.judging.stats import FAMILY_ALPHA, binomial_tail
from orchestrator.sweep.qualify_types import Cut, NodeState, Outcome, Phase, Probe, Reference, Result

MAX_GATE_DROP = 0.45  # gates and bisections: twice the drop allowed to pairs, at most this
# own probes of a node fast in some and slow in one, before the one is noise: where the slow one was
# decisively slow (more than twice the allowed drop, beyond any noise the level saw), more
DISAGREEING_PROBES = 8
DISAGREEING_PROBES_DECISIVE = 12
PSEUDO_PROBES = 4  # the weight, in probes, of the floor's own rate of noise reading slow
_CLASSES = ("alone", "pair", "group")
_WORDS = {"alone": "the node alone", "pair": "pairs", "group": "groups of three or more"}


def judged_family(nodes: int) -> float:
    """The judge's `m` for one probe of a qualification of `nodes` nodes. A node is named only on two
    slow probes of its own among at most DISAGREEING_PROBES_DECISIVE, so a probe's chance q of
    reading slow by noise names a healthy node with chance at most C(12, 2) q^2; over the nodes,
    FAMILY_ALPHA: q = sqrt(FAMILY_ALPHA / (66 nodes)), which the judge's 1 - FAMILY_ALPHA / m is at
    m = sqrt(66 nodes FAMILY_ALPHA) (8.1 at 20 nodes, 58 at 1,024: Bonferroni over every probe
    would take thousands, and call a node at half speed noise)."""
    pairs = DISAGREEING_PROBES_DECISIVE * (DISAGREEING_PROBES_DECISIVE - 1) / 2
    return max(1.0, math.sqrt(pairs * max(nodes, 1) * FAMILY_ALPHA))


def _class(probe: Probe) -> str:
    return _CLASSES[min(len(probe.nodes), 3) - 1]


class Judgement:
    """Every probe so far judged against its kind's level, and each node's state from them."""

    def __init__(self, results: list[Result], reference: Reference, prior: Prior, threshold: float,
                 min_fraction: float, span: Callable[[Probe], str | None], theirs=None) -> None:
        self._reference, self._prior, self._threshold, self._min_fraction = reference, prior, threshold, min_fraction
        self._span = span
        self.theirs: Callable[[Probe], bool] = theirs or (lambda probe: False)  # a slow uplink's: no node's, no level's
        self._results = list(results)
        self._levels: dict[tuple[Phase, str | None], Level | None] = {}
        self._cuts: dict[tuple[Phase, str | None], Cut | None] = {}  # the levels are fixed once built
        self._states: dict[tuple, dict[int, NodeState]] = {}
        family = self._family = judged_family(len({n for r in results for n in r.probe.nodes}))
        for kind in (Phase.INTRA, Phase.PAIRS):
            keys = {span(r.probe) for r in results if r.probe.phase.kind is kind}
            for key in keys:
                done = [r for r in results if r.status is Outcome.PASS and r.probe.phase.kind is kind
                        and span(r.probe) == key and not self.theirs(r.probe)]
                self._levels[kind, key] = healthy_level([r.busbw for r in done], prior, family,
                                                        [r.probe.nodes for r in done]) if len(done) >= 2 else None
        self._judged = [self._judge(r) for r in self._results]
        self._index = {id(r): i for i, r in enumerate(self._results)}
        self._of_node: dict[int, list[Result]] = {}
        for r in self._judged:
            for n in r.probe.nodes:
                self._of_node.setdefault(n, []).append(r)

    def level(self, kind: Phase, span: str | None) -> Level | None:
        return self._levels.get((kind, span))

    def cut(self, phase: Phase, span: str | None = None) -> Cut | None:
        """What a probe of this phase and span is judged against (None: nothing to compare with)."""
        if (phase, span) not in self._cuts:
            self._cuts[phase, span] = self._cut(phase, span)
        return self._cuts[phase, span]

    def _cut(self, phase: Phase, span: str | None) -> Cut | None:
        known = self._reference.of(phase)
        if known:
            return Cut(known, self._min_fraction)
        level = self._levels.get((Phase.INTRA if phase.kind is Phase.INTRA else Phase.PAIRS, span))
        if level is None:
            return None
        if phase.kind is not Phase.GATE:
            return Cut(level.reference, 1 - allowed_drop(level.floor, self._threshold))
        return Cut(level.reference, 1 - allowed_drop(level.floor, self._threshold, scale=2.0, cap=MAX_GATE_DROP))

    def _judge(self, r: Result) -> Result:
        if r.status is not Outcome.PASS:
            return r
        cut = self.cut(r.probe.phase, self._span(r.probe))
        if cut is None:
            return r
        if cut.slow(r.busbw):
            return dataclasses.replace(
                r, status=Outcome.SLOW, reference=cut.reference_gbps,
                detail=f"{r.busbw:.4g} GB/s < {cut.fraction:.2f} x {cut.reference_gbps:.4g} GB/s")
        return dataclasses.replace(r, reference=cut.reference_gbps)

    def judged(self, r: Result) -> Result:
        """`r` as judged now (one of the results given)."""
        return self._judged[self._index[id(r)]]

    def all_judged(self) -> list[Result]:
        return list(self._judged)

    def unconfirmed(self) -> list[tuple[int, ...]]:
        """Node sets of pairs that ran faster than their level's noise allows (judging/capacity.py
        `Level.high`) and were measured fewer than MIN_VALUES times: fastest first."""
        times: dict[tuple[int, ...], int] = {}
        for r in self._results:
            if r.probe.phase.kind is Phase.PAIRS:
                times[r.probe.nodes] = times.get(r.probe.nodes, 0) + 1
        fast = []
        for r in self._judged:
            level = self._levels.get((Phase.PAIRS, self._span(r.probe))) if r.probe.phase.kind is Phase.PAIRS else None
            if (r.status is Outcome.PASS and level is not None and not self._reference.pair and level.high(r.busbw)
                    and times[r.probe.nodes] < MIN_VALUES):
                fast.append((-r.busbw, r.probe.nodes))
        return list(dict.fromkeys(nodes for _, nodes in sorted(fast)))

    def unjudged_kinds(self) -> set[Phase]:
        """Kinds of probe that completed with nothing to judge their speed by."""
        return {r.probe.phase.kind for r in self._judged if r.status is Outcome.PASS and r.reference is None
                and not self.theirs(r.probe)}  # a slow uplink's probes are judged, as the switch's evidence

    def states(self, n_nodes: int, verdicts: dict[int, Outcome], bisect_suspects: set[int]) -> dict[int, NodeState]:
        """Each node's state (nodes with a verdict keep theirs); read once for the same verdicts and
        suspects (a qualification asks after each round and again as it plans the next)."""
        key = (n_nodes, tuple(sorted(verdicts.items())), frozenset(bisect_suspects))
        if key not in self._states:
            self._states[key] = self._read_states(n_nodes, verdicts, bisect_suspects)
        return dict(self._states[key])

    def _read_states(self, n_nodes: int, verdicts: dict[int, Outcome],
                     bisect_suspects: set[int]) -> dict[int, NodeState]:
        judged = self._judged
        proven = {n for r in judged if r.status is Outcome.PASS and r.reference is not None and len(r.probe.nodes) > 1
                  for n in r.probe.nodes}
        out: dict[int, NodeState] = {}
        own: dict[int, dict[str, list[Result]]] = {}
        first = {node: self._read(node, NodeState(proven=node in proven), proven, set(), None)
                 for node in range(n_nodes) if node not in verdicts}
        share = {node: _share(mine["pair"]) for node, mine in first.items()}
        for node in range(n_nodes):
            s = out[node] = NodeState(proven=node in proven, verdict=verdicts.get(node))
            if s.verdict is None:
                own[node] = self._read(node, s, proven, bisect_suspects, share)
        slow_rate = self._slow_rates(own)
        for node, mine in own.items():
            s = out[node]
            if s.verdict is not None:
                continue
            for c, rs in mine.items():
                slow = [r for r in rs if r.status is Outcome.SLOW]
                s.slow_of[c] = (len(slow), len(rs))
                decision = self._decide(slow, len(rs) - len(slow), slow_rate[c](node), n_nodes)
                if decision in (Outcome.SLOW, Outcome.INTERMITTENT):
                    s.verdict = decision
                    s.why = f"slow in {len(slow)} of {len(rs)} probes of its own ({_WORDS[c]})"
                elif decision is None:
                    s.needs, s.needs_class = True, c
        return out

    def _read(self, node: int, s: NodeState, proven: set[int], bisect_suspects: set[int],
              share: dict[int, float] | None) -> dict[str, list[Result]]:
        """A node's own probes by class; sets what it needs, and its verdict where a hang decides.
        `share`: each node's share of slow among its own pair probes at a first reading (None: that
        reading); a slow pair of two nodes that both proved fast is then not blamed on the member
        less often slow than the other (a healthy node paired with a flapping one)."""
        mine = self._of_node.get(node, [])
        own: dict[str, list[Result]] = {c: [] for c in _CLASSES}
        ambiguous = hung = False
        hangs = 0  # hung or failed pairs whose other member proved fast
        for r in mine:
            if self.theirs(r.probe) and r.status in (Outcome.PASS, Outcome.SLOW):
                continue  # its speed is the uplink's; a hang or a failure is still the node's
            pair = r.probe.phase is Phase.PAIRS and len(r.probe.nodes) == 2
            other = (r.probe.nodes[1] if r.probe.nodes[0] == node else r.probe.nodes[0]) if pair else None
            if r.status is Outcome.PASS:
                if r.reference is not None:
                    own[_class(r.probe)].append(r)
                continue
            if r.status is Outcome.SLOW:
                if self._own(r, node, proven) and not (
                        r.probe.phase is Phase.PAIRS and s.proven and share is not None
                        and share.get(node, 0.0) < share.get(other, 0.0)):
                    own[_class(r.probe)].append(r)
                elif r.probe.phase.kind is not Phase.GATE and not s.proven:
                    ambiguous = True
                continue
            # hung or failed without naming a culprit (a named one has its verdict): its own
            # alone or as a retest's suspect; with a partner that proved fast, twice
            if r.culprits:
                continue
            if len(r.probe.nodes) == 1 or (r.probe.phase is Phase.RETEST and r.probe.nodes[0] == node):
                s.verdict, s.why = r.status, f"{r.status.value} again, " + (
                    "alone" if len(r.probe.nodes) == 1 else "with partners that proved fast")
            elif r.probe.phase is Phase.PAIRS and other in proven:
                hangs += 1
                if hangs >= 2:
                    s.verdict, s.why = r.status, f"{r.status.value} in {hangs} pairs with partners that proved fast"
                hung = True
            elif not s.proven:
                hung = True
        if node in bisect_suspects and not any(
                r.probe.phase is Phase.RETEST and len(r.probe.nodes) > 2 and r.probe.nodes[0] == node for r in mine):
            s.needs, s.needs_class = True, "group"
        if hung or (not s.proven and (ambiguous or not any(len(r.probe.nodes) > 1 for r in mine))):
            s.needs = s.unresolved = True
        return own

    def _slow_rates(self, own: dict[int, dict[str, list[Result]]]) -> dict[str, Callable[[int], float]]:
        """Per class of probe, how often a healthy node's own probe reads slow in this
        qualification (noise beyond the floor's estimate), for each node from the others that were
        fast in that class: their slow probes over their probes, with PSEUDO_PROBES at the rate
        the floor is set for (FAMILY_ALPHA / m), so that a few probes do not make it 0 or 1."""
        prior_rate = FAMILY_ALPHA / self._family
        rates: dict[str, Callable[[int], float]] = {}
        for c in _CLASSES:
            counts = {n: (sum(r.status is Outcome.SLOW for r in rs[c]), len(rs[c])) for n, rs in own.items()
                      if any(r.status is Outcome.PASS for r in rs[c])}
            slow, total = sum(k for k, _ in counts.values()), sum(m for _, m in counts.values())

            def rate(node: int, slow=slow, total=total, counts=counts) -> float:
                k, m = counts.get(node, (0, 0))
                return (slow - k + PSEUDO_PROBES * prior_rate) / (total - m + PSEUDO_PROBES)

            rates[c] = rate
        return rates

    def _own(self, r: Result, node: int, proven: set[int]) -> bool:
        """Whether a slow probe is this node's own: alone; a retest of which it is the suspect; a pair
        whose other member proved fast. Gates and bisections are nobody's own."""
        if len(r.probe.nodes) == 1:
            return True
        if r.probe.phase is Phase.RETEST:
            return r.probe.nodes[0] == node
        if r.probe.phase is Phase.PAIRS:
            return all(n in proven for n in r.probe.nodes if n != node)
        return False

    def _decide(self, slow: list[Result], fast: int, slow_rate: float, nodes: int) -> Outcome | None:
        """One class of a node's own probes: SLOW (never fast) or INTERMITTENT (fast too) where two
        or more of them read slow and noise at this qualification's `slow_rate` would read that many
        slow with chance below FAMILY_ALPHA over the nodes; PASS where nothing (or noise) is against
        it; None where it needs another measurement."""
        if not slow:
            return Outcome.PASS
        k, m = len(slow), len(slow) + fast
        if k >= 2 and binomial_tail(k, m, slow_rate) <= FAMILY_ALPHA / max(nodes, 1):
            return Outcome.SLOW if fast == 0 else Outcome.INTERMITTENT
        decisive = any(self.cut(r.probe.phase, self._span(r.probe)).decisive(r.busbw) for r in slow)
        enough = DISAGREEING_PROBES_DECISIVE if decisive else DISAGREEING_PROBES
        return None if m < enough else Outcome.PASS


def _share(rs: list[Result]) -> float:
    """The share of these probes that read slow (0 for none)."""
    return sum(r.status is Outcome.SLOW for r in rs) / len(rs) if rs else 0.0
