"""Slow uplinks (issue 46): where a topology places the nodes under leaf switches, a leaf whose pairs
across it are slow while its pairs inside it are not is a slow uplink, not a row of slow nodes or
slow pairs. Pure; the report's pair rule (diagnosis._pair_flags) asks it first and leaves the pairs
it explains to it.

The rule, per leaf L of a pairwise shape, over the pairs whose two nodes proved fast (some pair of
each reaches the level, so a slow node's pairs are its own evidence, not the switch's), with R the
judged pairs not across L (inside any leaf, or across other leaves):
- L's pairs across it run below R: their median more than `threshold` below R's, and their ranks
  among R's lower than noise makes (a one-sided rank-sum test, normal approximation, below
  FAMILY_ALPHA over the leaves);
- L's pairs inside it do not: at least one, their median above the median across by more than
  `threshold`, and not lower than R's by that test (else its nodes are slow, not its uplink).
Leaves are found one at a time, the slowest first, and the pairs across one found leave the others'
judgement (a healthy leaf's pairs to a slow one are that one's evidence). Two leaves share their pairs
across: both meet the rule, and the finding is the path between them.
A leaf of one node has no pair inside: its node's own verdict stands. The pairs across a slow uplink
are its evidence and nothing else's (diagnosis._pair_flags): the pairs of a round that cross it
share it, unequally, so one pair's share is no fault of that pair or its nodes."""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import pandas as pd

from orchestrator.judging.capacity import healthy_level
from orchestrator.judging.judge import MIN_VALUES, prior_for
from orchestrator.judging.stats import FAMILY_ALPHA
from orchestrator.sweep.topology import path


@dataclass(frozen=True)
class Uplink:
    """A slow uplink: the leaf (or the two leaves whose path is slow), its evidence."""

    switches: tuple[str, ...]
    nodes: tuple[int, ...]  # node codes under the switches (evidence; none flagged on its own)
    low: int  # pairs across it that are low
    across: int  # pairs across it judged
    inside: int  # pairs inside it judged
    busbw_gbps: float  # the median busbw of its pairs across
    across_mask: np.ndarray  # over the shape's rows: its pairs across (a slow node's too)
    factor: float  # their median over the median of the other pairs: what the uplink costs


def slow_uplinks(leaf_of: dict[int, str], a: np.ndarray, b: np.ndarray, low: np.ndarray, busbw: np.ndarray,
                 fast: set[int], threshold: float, parents: dict[str, str] | None = None) -> list[Uplink]:
    """The shape's slow uplinks: `a`, `b` the pairs' node codes, `low` which pairs are low, `fast`
    the nodes that proved fast (see the module's rule). Where the tree is deeper (`parents`: switch
    -> the switch above it), the switches above the leaves are judged first, the highest level with
    two or more switches first, each level by the same rule with its switches in the leaves' place; a
    switch above leaves is named only where its pairs across are slow from every switch below it to
    every switch below the others (else a slow leaf's pairs across would be its parent's, or those of
    the spine across from it), and the pairs across it found leave the lower levels' judgement. Then
    the leaves."""
    paths = {leaf: path(leaf, parents or {}) for leaf in set(leaf_of.values())}
    # level k above the leaves: each node's switch k steps up, where that switch has one above it (a
    # root has nothing across it; a leaf under the root, or under no switch, takes no part up there)
    levels = [leaf_of] + [{n: paths[s][k] for n, s in leaf_of.items() if k < len(paths[s]) - 1}
                          for k in range(1, max(map(len, paths.values()), default=1) - 1)]
    keep = np.ones(len(a), dtype=bool)
    found: list[Uplink] = []
    for k in range(len(levels) - 1, -1, -1):
        if len(set(levels[k].values())) < 2:
            continue  # one switch: nothing across it to judge
        ups = _level(levels[k], a, b, low, busbw, fast, threshold, keep, None if not k else (
            lambda switches, judged, k=k: _below_all_slow(switches, levels[k], levels[k - 1], a, b, busbw, judged,
                                                          threshold)))
        if k and len(set(levels[k].values())) == 2:  # two switches share their pairs across: both, or
            ups = [u for u in ups if len(u.switches) == 2]  # neither (one whose inside is slow: its leaves)
        for u in ups:
            keep &= ~u.across_mask
        found += ups
    return found


def _below_all_slow(switches: tuple[str, ...], level: dict[int, str], lower: dict[int, str], a: np.ndarray,
                    b: np.ndarray, busbw: np.ndarray, keep: np.ndarray, threshold: float) -> bool:
    """Whether the `keep` pairs across `switches` (above leaves) are slow from every switch below
    them, and to every switch below the others: the median of each one's pairs across more than
    `threshold` below the pairs not across. A slow leaf below, or beyond, slows only its own pairs
    (blocks of a switch below and one beyond are not asked each: the pairs of a round share a slow
    uplink, and a block measured in rounds that load it lightly can run near full rate)."""
    ga = np.array([level.get(int(x), "") for x in a], dtype=object)
    gb = np.array([level.get(int(x), "") for x in b], dtype=object)
    across = keep & (ga != gb) & (ga != "") & (gb != "") & (np.isin(ga, switches) | np.isin(gb, switches))
    rest = keep & (ga != "") & (gb != "") & ~across
    if not rest.any():
        return True
    cut = (1 - threshold) * float(np.median(busbw[rest]))
    sides: dict[tuple[bool, str], list[float]] = {}
    for i in np.flatnonzero(across):
        inside, outside = (a[i], b[i]) if ga[i] in switches else (b[i], a[i])
        sides.setdefault((True, lower.get(int(inside), "")), []).append(float(busbw[i]))
        sides.setdefault((False, lower.get(int(outside), "")), []).append(float(busbw[i]))
    return all(np.median(values) < cut for values in sides.values())


def _level(leaf_of: dict[int, str], a: np.ndarray, b: np.ndarray, low: np.ndarray, busbw: np.ndarray,
           fast: set[int], threshold: float, keep: np.ndarray, accept=None) -> list[Uplink]:
    """One level's slow switches (`leaf_of`: node code -> its switch at that level) over the pairs
    `keep` leaves, found one at a time, the surest first (the rank test's p-value, then the lower
    factor) of those `accept((switch,), judged pairs)` takes; the pairs across one found are then left
    out of the others' judgement (a healthy leaf's pairs to a slow one are slow for that one's uplink,
    not its own)."""
    la = np.array([leaf_of.get(int(x), "") for x in a], dtype=object)
    lb = np.array([leaf_of.get(int(x), "") for x in b], dtype=object)
    judged = keep & np.isin(a, list(fast)) & np.isin(b, list(fast)) & (la != "") & (lb != "")
    leaves = sorted(set(la[judged]) | set(lb[judged]))
    alpha = FAMILY_ALPHA / max(len(leaves), 1)
    found: list[Uplink] = []
    while True:
        slow = [(p, crossing / level, leaf, mine, inside) for leaf in leaves
                if not any(leaf in u.switches for u in found)
                for p, crossing, level, mine, inside in [_leaf(leaf, la, lb, judged, busbw, threshold, alpha)]
                if mine is not None and (accept is None or accept((leaf,), judged))]
        if not slow:
            return found
        _, factor, leaf, mine, inside = min(slow, key=lambda x: (x[0], x[1], x[2]))
        # two leaves whose pairs across are the same pairs (two leaves alone): one finding, the path
        both = [other for _, _, other, m, _ in slow if other != leaf and np.array_equal(m, mine)]
        inside = inside | (judged & (la == lb) & np.isin(la, both))
        switches = tuple(sorted([leaf, *both]))
        under = np.concatenate([a[judged], b[judged]])
        nodes = tuple(sorted({int(x) for x in under if leaf_of.get(int(x)) in switches}))
        found.append(Uplink(switches, nodes, int(low[mine].sum()), int(mine.sum()), int(inside.sum()),
                            float(np.median(busbw[mine])),
                            (la != lb) & (la != "") & (lb != "") & (np.isin(la, switches) | np.isin(lb, switches)),
                            float(factor)))
        judged = judged & ~mine


def _leaf(leaf: str, la: np.ndarray, lb: np.ndarray, judged: np.ndarray, busbw: np.ndarray, threshold: float,
          alpha: float) -> tuple[float, float, float, np.ndarray | None, np.ndarray | None]:
    """One leaf under the module's rule over the `judged` pairs: the p-value of its pairs across
    running lower than the rest, the median across it, the median of the rest, and its pairs across
    and inside where its uplink is slow (else None, None)."""
    mine = judged & (la != lb) & ((la == leaf) | (lb == leaf))
    inside = judged & (la == leaf) & (lb == leaf)
    rest = judged & ~mine
    if not inside.any() or mine.sum() < 2 or not rest.any():
        return 1.0, 0.0, 1.0, None, None
    level, crossing = float(np.median(busbw[rest])), float(np.median(busbw[mine]))
    p = below(busbw[mine], busbw[rest])
    if crossing > (1 - threshold) * level or p > alpha:
        return p, crossing, level, None, None
    if np.median(busbw[inside]) * (1 - threshold) <= crossing or below(busbw[inside], busbw[rest]) <= alpha:
        return p, crossing, level, None, None  # inside as slow: the leaf's nodes, not its uplink
    return p, crossing, level, mine, inside


def below(x: np.ndarray, y: np.ndarray) -> float:
    """One-sided p-value that `x` runs lower than `y` (Mann-Whitney's rank sum, normal approximation
    with a continuity correction; tied values share their mean rank, the variance corrected for them:
    imported nccl-tests rates have two decimals)."""
    n1, n2 = len(x), len(y)
    n = n1 + n2
    values, inverse, counts = np.unique(np.concatenate([x, y]), return_inverse=True, return_counts=True)
    average = np.cumsum(counts) - (counts - 1) / 2  # tied values share their mean rank
    u = average[inverse[:n1]].sum() - n1 * (n1 + 1) / 2
    sd = math.sqrt(n1 * n2 / 12 * ((n + 1) - float((counts**3 - counts).sum()) / (n * (n - 1)))) if n > 1 else 0.0
    return NormalDist().cdf((u + 0.5 - n1 * n2 / 2) / sd) if sd > 0 else 1.0


def inside_level(shape: pd.DataFrame, leaves: dict[int, str]) -> pd.DataFrame:
    """The shape judged against the healthy level of its pairs inside leaves (the one judge's
    healthy_level), where there are enough of them: with two leaves most pairs are across, and a
    slow path between them would otherwise be the level."""
    inside = (shape.node_first.map(leaves) == shape.node_last.map(leaves)).to_numpy()
    busbw = shape.busbw_gbps.to_numpy()
    level = healthy_level(busbw[inside], prior_for(shape.backend.iloc[0], True), len(shape)) \
        if inside.sum() >= MIN_VALUES else None
    if level is None:
        return shape
    return shape.assign(peer_median=level.reference, ratio=busbw / level.reference, floor=level.floor)


def unjudged(scores: pd.DataFrame, leaves: dict[int, str]) -> list[str]:
    """Where a switch tree was given but the run cannot show a slow switch, one line each (the
    report's warnings): no pairwise rows, or a pairwise shape with fewer than MIN_VALUES pairs inside
    leaves, whose level is then every pair's, most of them across leaves, which a slow path sets."""
    pairs = scores[scores.pattern == "pairwise"]
    if pairs.empty:
        return [("--topology: the run has no pairwise rows, and switches are judged on node pairs "
                 "(measure with --patterns pairwise)")]
    out = []
    for collective, shape in pairs.groupby("collective", observed=True, sort=True):
        first, last = shape.node_first.map(leaves), shape.node_last.map(leaves)
        inside = int((first == last).sum())
        if inside < MIN_VALUES:
            out.append(f"--topology: {collective} pairwise has {inside} pair(s) inside leaves and "
                       f"{len(shape) - inside} across; with fewer than {MIN_VALUES} inside, the level is every "
                       "pair's, so a slow path between leaves can go unnamed (3 or more nodes per leaf, or more leaves)")
    return out
