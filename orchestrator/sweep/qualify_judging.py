"""How qualify judges a probe's speed: a reference and the fraction of it a healthy probe reaches
(`Cut`), drawn from expected values or from what the cluster measured, and the every-pair rounds
that small clusters without expected values are judged by. Pure.

The round's spread is the one judge's robust estimate (judging/judge.py: in log space, robust to
a slow half of a small round), and its minimum of values is the judge's; qualify keeps its own
policy on top: a probe is slow `threshold` below the median, or 3 robust sigmas where the round is
noisier, at most _MAX_DROP (a noisy round still calls a node at half speed slow: qualify retests
before it names, so its false positives are bounded by the retest, not by a wide line)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from orchestrator.judging.judge import MIN_VALUES, robust_sigma
from orchestrator.sweep.qualify_types import Outcome, Phase, Probe, Result

MIN_PEERS = MIN_VALUES  # a median of two cannot say which one is off: without expected values, speed needs three
ALL_PAIRS_NODES = range(3, 6)  # without expected values, these cluster sizes are judged by every pair
_SPREAD_PROBES = 4  # a round's spread is estimated from this many probes or more
_SPREAD_Z = 3.0  # robust standard deviations a healthy probe may fall below the median
_MAX_DROP = 0.25  # the noisiest round still calls a node at half speed slow, even measured 30% high
MAX_GATE_DROP = 0.45  # gates and bisections: twice the drop allowed to pairs, at most this


@dataclass(frozen=True)
class Cut:
    """A reference (GB/s) and the fraction of it a healthy probe reaches."""

    reference_gbps: float
    fraction: float

    def slow(self, busbw_gbps: float) -> bool:
        return busbw_gbps < self.fraction * self.reference_gbps

    def decisive(self, busbw_gbps: float) -> bool:
        """Below the line by more than twice the allowed drop: no noise of this round explains it."""
        return busbw_gbps < (2 * self.fraction - 1) * self.reference_gbps


def median_cut(values: list[float], threshold: float) -> Cut | None:
    """The median of all of a round's completed probes of one kind, slow ones included; None with
    fewer than MIN_PEERS (which of two is off cannot be said)."""
    if len(values) < MIN_PEERS:
        return None
    median = statistics.median(values)
    return Cut(median, 1 - allowed_drop(values, median, threshold)) if median > 0 else None


def allowed_drop(values: list[float], median: float, threshold: float) -> float:
    """`threshold`, widened to the round's own noise where there are enough probes to see it."""
    if len(values) < _SPREAD_PROBES or median <= 0:
        return threshold
    logs = [math.log(v / median) for v in values if v > 0]
    sigma = robust_sigma(logs) or 0.0
    return max(threshold, min(1 - math.exp(-_SPREAD_Z * sigma), _MAX_DROP))


def node_pair_cut(results: list[Result], threshold: float) -> Cut | None:
    """3-5 nodes, every pair measured: the median over nodes of each node's median pair (a slow
    node's pairs are all slow; a healthy node's are mostly with healthy nodes)."""
    mine: dict[int, list[float]] = {}
    for r in results:
        if r.status is Outcome.PASS and r.busbw is not None:
            for n in r.probe.nodes:
                mine.setdefault(n, []).append(r.busbw)
    typical = [statistics.median(v) for v in mine.values()]
    if len(typical) < MIN_PEERS or statistics.median(typical) <= 0:
        return None
    return Cut(statistics.median(typical), 1 - threshold)


def circle_rounds(nodes: list[int]) -> list[list[Probe]]:
    """Every pair of `nodes` once, in rounds of disjoint pairs (the circle method: one node fixed,
    the others rotating; an odd count gets a bye): N-1 rounds, N when N is odd."""
    ring = list(nodes) + ([None] if len(nodes) % 2 else [])
    rounds = []
    for _ in range(len(ring) - 1):
        half = len(ring) // 2
        pairs = [(ring[i], ring[-1 - i]) for i in range(half)]
        rounds.append([Probe(Phase.PAIRS, (a, b)) for a, b in pairs if a is not None and b is not None])
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return rounds
