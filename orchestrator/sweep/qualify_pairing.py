"""How qualify pairs nodes: its rounds of fresh pairs (the circle method: every pair of an order
once, in rounds of disjoint pairs; how many rounds a qualification of N nodes takes) and a
suspect's partners for its retests. Pure."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from orchestrator.sweep.qualify_types import NodeState, Phase, Probe

LOOKS = 6  # fresh pairs every node is in (a fault in half its probes shows twice in 6 in 89% of nodes)
HEALTHY_SHARE = 0.4  # the fewest healthy nodes, as a share, that the fresh pairs are sure to find together
MISS = 0.005  # ... sure: the chance that no two of them met


def fresh_rounds(n: int) -> int:
    """Rounds of fresh pairs for n nodes: LOOKS, and as many as make two healthy nodes meet (with
    MISS left) where only HEALTHY_SHARE of them are healthy: a round pairs two given nodes with
    chance 1/(n-1), so h healthy nodes meet in it with chance ~ 1 - exp(-h(h-1) / 2(n-1)); at most
    every pair (n-1 rounds, n when n is odd)."""
    if n < 2:
        return 0
    every = n - 1 if n % 2 == 0 else n
    h = max(2, round(HEALTHY_SHARE * n))
    meet = h * (h - 1) / (2 * (n - 1))
    return min(every, max(LOOKS, math.ceil(-math.log(MISS) / meet)))


def circle_round(order: list[int], r: int) -> list[tuple[int, int]]:
    """Round r of the circle method over `order` (every pair once in len-1 rounds, len when odd):
    the first node fixed, the others rotated by r; an odd count gets a bye."""
    ring = list(order) + ([None] if len(order) % 2 else [])
    m = len(ring)
    if m < 2 or r >= m - 1:
        return []
    rest = ring[1:]
    shift = r % (m - 1)
    rotated = [ring[0], *rest[len(rest) - shift:], *rest[:len(rest) - shift]]
    pairs = [(rotated[i], rotated[m - 1 - i]) for i in range(m // 2)]
    return [(a, b) for a, b in pairs if a is not None and b is not None]


def circle_rounds(nodes: list[int]) -> list[list[Probe]]:
    """Every pair of `nodes` once, in rounds of disjoint pairs (circle_round): N-1 rounds, N when N is odd."""
    count = len(nodes) - 1 if len(nodes) % 2 == 0 else len(nodes)
    return [[Probe(Phase.PAIRS, p) for p in circle_round(nodes, r)] for r in range(count)]


def across_round(leaves: tuple[str | None, ...], groups: list[list[int]], rng: random.Random) -> list[tuple[int, int]]:
    """One round of pairs across leaves (`groups`: the nodes under each leaf), every node in one
    where no leaf holds more than half of them: a node of the leaf with the most nodes left, paired
    with a node of another leaf drawn at random (weighted by the nodes it has left), so that each
    leaf's pairs spread over the others (a leaf paired wholly with one other could not tell its
    uplink from that one's). A leaf of more than half keeps its surplus unpaired. [] with fewer
    than two leaves."""
    if len(groups) < 2:
        return []
    left = [rng.sample(g, len(g)) for g in groups]
    pairs = []
    while True:
        open_ = sorted((k for k in range(len(left)) if left[k]), key=lambda k: (-len(left[k]), rng.random()))
        if len(open_) < 2:
            return pairs
        other = rng.choices(open_[1:], [len(left[k]) for k in open_[1:]])[0]
        pairs.append((left[open_[0]].pop(), left[other].pop()))


def leaf_rounds(leaves: tuple[str | None, ...], groups: list[list[int]], rng: random.Random) -> list[list[tuple]]:
    """Qualify's rounds under leaf switches (`groups`: the nodes under each leaf), before its fresh
    pairs: one of pairs inside each leaf (pairs at random are mostly across leaves), then two of
    every node across leaves (across_round), each uplink loaded as a job loads it; all three where
    there are leaves (one may be empty: leaves of one node, or one leaf), none without."""
    inside = [p for g in groups for p in circle_round(rng.sample(g, len(g)), 0)]
    return [inside, across_round(leaves, groups, rng), across_round(leaves, groups, rng)] if groups else []


def plan_retests(state: dict[int, NodeState], out: Callable[[int], bool],
                 allowed: Callable[[int, int], bool]) -> list[Probe]:
    """Each node that needs a measurement of its own, with as many partners that proved fast as it
    needs (`allowed(node, partner)`: of its own NVLink domain, not across a slow uplink), while
    partners last; the rest wait for the next round. Partners: nodes with nothing against them
    first; on a noisy host, where every node may have read slow once, the least suspect. `out`:
    a node no longer probed."""
    suspects = sorted((n for n, s in state.items() if s.needs and not out(n)),
                      key=lambda n: (state[n].proven, n))  # the unproven first: they have no other way
    partners = sorted((n for n, s in state.items() if s.proven and not out(n)),
                      key=lambda n: (not state[n].good, state[n].suspicion, n))
    probes, busy = [], set()
    for node in suspects:
        if node in busy:
            continue
        k = {"alone": 0, "pair": 1, "group": 2}[state[node].needs_class]
        if k == 0:
            probes.append(Probe(Phase.INTRA, (node,)))
            busy.add(node)
            continue
        mine = [p for p in partners if p != node and p not in busy and allowed(node, p)][:k]
        if len(mine) == k:
            probes.append(Probe(Phase.RETEST, (node, *mine)))
            busy |= {node, *mine}
    return probes


def span(nodes: tuple[int, ...], domains: tuple[str | None, ...], leaves: tuple[str | None, ...]) -> str | None:
    """Where nodes lie in NVLink domains (`domains`, () where there are not two or more), whether a
    probe of `nodes` runs inside one ('intra': over NVLink) or across ('cross': over the network);
    under leaf switches, whether inside a leaf ('leaf') or across ('spine'); a probe is judged only
    against its own span; None for one node, or without either."""
    if len(nodes) < 2:
        return None
    within = {domains[n] for n in nodes} if domains else set()
    where = ("intra" if len(within) == 1 and None not in within else "cross") if within else None
    if where == "intra" or not any(leaves):
        return where
    leaf = "leaf" if len({leaves[n] for n in nodes}) == 1 and leaves[nodes[0]] else "spine"
    return leaf if where is None else f"{where}-{leaf}"


def take_pairs(waiting: list[tuple[int, int]], busy: set[int],
               stuck: Callable[[int], bool]) -> tuple[list[Probe], list[tuple[int, int]]]:
    """The waiting pairs that run this round, in order, as probes (neither node busy, nor taken by
    an earlier one); and those left waiting. A pair with a `stuck` node is dropped."""
    out, left, busy = [], [], set(busy)
    for a, b in waiting:
        if stuck(a) or stuck(b):
            continue
        if a in busy or b in busy:
            left.append((a, b))
            continue
        out.append(Probe(Phase.PAIRS, (a, b)))
        busy |= {a, b}
    return out, left
