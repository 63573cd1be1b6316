"""What a user reads out of a run: intra vs inter tables, and the flags an operator gates on.
Pure functions of a `Frame` (one run's rows); no Ray, no I/O.

Every group is compared with its peers of the same shape (collective, dtype, op, placement,
pattern, world size, ranks per node) at the largest size the shape measured: with at least three
groups, one is slow when its busbw is more than `threshold` below the shape's healthy level AND
below the floor the one judge sets (judging/judge.py: the level's spread, pooled with the
platform's prior; a 3x drop always is). The healthy level is what the fastest agreeing groups
delivered (judging/capacity.py): a group runs as fast as its slowest member, so where most groups
hold a slow member (half the nodes slow, or two slow nodes among five in every pair) the median is
the slow level and would flag nothing. The slowness is named where it can be placed, each member
by its best group (what it demonstrably delivers):
- pairwise (and 2-rank inter) groups: a node whose best pair is slow (every pair of it is); a node
  pair slower than both its nodes deliver with others (their path), and a node whose pairs are
  slow that way with two partners or more while its other pairs are fast (`intermittent`);
- intra-pairwise groups: the slow GPU pair of a node, and a GPU whose best pair is slow;
- intra groups: their node;
- inter groups (rail-aligned): a rail all of whose groups are slow, or a node all of whose
  groups are slow; otherwise the group and its nodes;
- mixed and kbatch groups: the group and its nodes.
Failed, timed-out and skipped groups are flagged too; stragglers (the ranks the others wait for)
are analysis.stragglers'.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum

import numpy as np
import pandas as pd

from orchestrator.analysis.frame import Frame
from orchestrator.analysis.scores import SHAPE, agreement, shape_scores
from orchestrator.analysis.uplinks import inside_level, slow_uplinks
from orchestrator.judging.judge import MIN_VALUES, allowed_drop
from orchestrator.judging.stats import FAMILY_ALPHA, binomial_tail
from orchestrator.sweep.sizes import format_bytes
from workloads.messages import Status, Topology

TOPOLOGIES = (Topology.INTRA.value, Topology.INTER.value, Topology.MIXED.value)  # every report's columns
DOMAIN = Topology.INTRA_DOMAIN.value  # a column only where rows have it (NVLink domains across nodes)


def topologies(df: pd.DataFrame) -> tuple[str, ...]:
    """The topology columns of `df`'s tables: intra, inter, mixed, and intra-domain where it has any."""
    return TOPOLOGIES + ((DOMAIN,) if "topology" in df and (df.topology == DOMAIN).any() else ())


class FlagKind(str, Enum):
    """What a report flag found (its JSON value is the string)."""

    SLOW_PAIR = "slow_pair"
    SLOW_NODE = "slow_node"
    INTERMITTENT = "intermittent"
    SLOW_GROUP = "slow_group"
    SLOW_RAIL = "slow_rail"
    SLOW_GPU_PAIR = "slow_gpu_pair"
    SLOW_GPU = "slow_gpu"
    SLOW_UPLINK = "slow_uplink"
    STRAGGLER = "straggler"
    STRAGGLER_NODE = "straggler_node"
    FAILED_GROUP = "failed_group"
    BELOW_EXPECTED = "below_expected"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Flag:
    """One finding: its `kind` (FlagKind), where (node IPs; ranks: local GPU indices for GPU kinds
    and rails, global ranks for stragglers and failures), what and by how much."""

    kind: FlagKind
    nodes: list[str]
    ranks: list[int]
    collective: str | None
    msg_bytes: int | None
    value: float | None  # the measurement (busbw GB/s, or time ratio for stragglers)
    reference: float | None  # what it is compared with (its shape's healthy level, expected value)
    message: str
    source: str | None = None  # where the reference comes from (expected values)
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        # not dataclasses.asdict: it deep-copies every field, a second per 10,000 flags
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        return {**out, "kind": str(self.kind), "nodes": list(self.nodes), "ranks": list(self.ranks), **self.extra}


# -- flags ------------------------------------------------------------------------------------
def flags(frame: Frame, threshold: float) -> list[Flag]:
    return judge(frame, threshold)[0]


def judge(frame: Frame, threshold: float) -> tuple[list[Flag], str | None]:
    """The peer flags, and where none names a slow member, what the run can say without an
    expected value (`agreement`)."""
    df = frame.df
    scores = shape_scores(df)
    scores = scores[scores.peers >= MIN_VALUES]
    found = _peer_flags(frame, scores, threshold)
    return found + failures(frame), None if found else agreement(scores)


def _peer_flags(frame: Frame, scores: pd.DataFrame, threshold: float) -> list[Flag]:
    out: list[Flag] = []
    out += _pair_flags(frame, scores[scores.pattern == "pairwise"], threshold)
    out += _gpu_pair_flags(frame, scores[scores.pattern == "intra-pairwise"], threshold)
    out += _intra_flags(frame, scores[scores.pattern == "intra"], threshold)
    rest = scores[~scores.pattern.isin(["pairwise", "intra-pairwise", "intra"])]
    for _, shape in rest.groupby(SHAPE, observed=True):
        out += _group_flags(frame, shape, threshold)
    return _merge(out)


def _merge(found: list[Flag]) -> list[Flag]:
    """One flag per culprit (kind, nodes, ranks, collective), from the shapes that name it: the
    worst measurement is kept, and how many groups said so."""
    merged: dict[tuple, Flag] = {}
    for f in found:
        key = (f.kind, tuple(f.nodes), tuple(f.ranks), f.collective)
        seen = merged.get(key)
        evidence = (seen.extra.get("groups", 1) if seen else 0) + f.extra.get("groups", 1)
        if seen is None or _severity(f) < _severity(seen):
            seen = f
        merged[key] = Flag(**{**seen.__dict__, "extra": {**seen.extra, "groups": evidence}})
    return list(merged.values())


def _severity(f: Flag) -> float:
    if f.value is not None and f.reference:
        return f.value / f.reference
    return f.extra.get("ratio", 1.0)


def _slow(scores: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """Groups below both the threshold and the judge's floor of their shape."""
    return scores[_low(scores.ratio, scores.floor, threshold)].sort_values("ratio")


def _msg(row, what: str) -> str:
    return (f"{what}: {row.collective} {format_bytes(int(row.msg_bytes))} busbw {row.busbw_gbps:.4g} GB/s, "
            f"{1 - row.ratio:.0%} below what the fastest of its {int(row.peers)} peer groups deliver "
            f"({row.peer_median:.4g}; noise floor {1 - row.floor:.0%})")


def _flag(kind, frame: Frame, row, nodes, ranks, what: str) -> Flag:
    return Flag(kind, frame.ips(nodes), list(ranks), row.collective, int(row.msg_bytes), float(row.busbw_gbps),
                float(row.peer_median), _msg(row, what))


def _best_by_member(scores: pd.DataFrame, a: str, b: str) -> pd.Series:
    """Every member's (node's or GPU's) best ratio over the groups it is in (columns a, b): what it
    demonstrably delivers, since no group runs faster than its slowest member."""
    both = pd.concat([scores[[a, "ratio"]].rename(columns={a: "m"}), scores[[b, "ratio"]].rename(columns={b: "m"})])
    return both.groupby("m", observed=True).ratio.max()


def _low(ratio, floor: float, threshold: float):
    return ratio < 1 - allowed_drop(floor, threshold)


def _pair_flags(frame: Frame, scores: pd.DataFrame, threshold: float) -> list[Flag]:
    """Node pairs by the bottleneck rule. A node none of whose pairs reaches the level is slow (its
    best pair says how slow). A pair below the level whose two nodes both proved fast in other
    pairs is slow through its path or one of them now and then: it is blamed on the node whose pairs
    are low more often (both, where as often); a node blamed for two low pairs or more, more than
    the shape's noise would make (a binomial tail below FAMILY_ALPHA over the nodes), is
    `intermittent`, those pairs its evidence; the other such pairs are slow pairs. Pairs across a
    slow uplink are neither: pairs of one round share it unequally, and their shares are its evidence."""
    out = []
    for _, shape in scores.groupby(SHAPE, observed=True):
        if frame.leaves:  # the level of the pairs inside leaves: pairs across may be most, and slow
            shape = inside_level(shape, frame.leaves)
        floor, row0 = float(shape.floor.iloc[0]), shape.iloc[0]
        a, b = shape.node_first.to_numpy(), shape.node_last.to_numpy()
        low = _low(shape.ratio, floor, threshold).to_numpy()
        fast_nodes = set(a[~low]) | set(b[~low])
        congested = np.zeros(len(shape), dtype=bool)
        if frame.leaves:  # pairs across a slow uplink are judged against their own level, then
            uplinks, ratio, congested = uplink_flags(frame, shape, low, fast_nodes, threshold)
            out += uplinks
            shape = shape.assign(ratio=ratio)
            low = _low(shape.ratio, floor, threshold).to_numpy()
            fast_nodes = set(a[~low]) | set(b[~low])
        best = _best_by_member(shape, "node_first", "node_last")
        moded = not frame.leaves and row0.below > 0  # a slower mode apart from the level's (judging/capacity.py)
        if moded:  # a node with no pair in the level's own mode is slow: each of its pairs says so, together
            in_mode = shape.ratio.to_numpy() >= row0.mode_floor
            fast_nodes = set(a[in_mode & ~low]) | set(b[in_mode & ~low])
        slow_nodes = [n for n in best.index if n not in fast_nodes]
        for node in sorted(slow_nodes, key=lambda n: best[n]):
            ratio = float(best[node])
            beside = (f"none of its pairs is among the {int(row0.peers - row0.below)} of the level's own mode, "
                      f"{int(row0.below)} pairs apart below it" if moded else f"noise floor {1 - floor:.0%}")
            out.append(Flag(FlagKind.SLOW_NODE, [frame.nodes[node]], [], row0.collective, int(row0.msg_bytes),
                            ratio * float(row0.peer_median), float(row0.peer_median),
                            f"slow node {frame.label(node)}: no {row0.collective} pair of it reaches what the fastest "
                            f"of {int(row0.peers)} pairs deliver ({row0.peer_median:.4g} GB/s); its best runs "
                            f"{ratio:.0%} of it ({beside})", extra={"ratio": ratio}))
        # a pair across a slow uplink shares it with the round's other pairs across: its share is
        # the uplink's evidence, not a path or node of its own (its nodes are judged by all pairs)
        proven = np.isin(a, list(fast_nodes)) & np.isin(b, list(fast_nodes)) & ~congested
        blamed = _blame(a[proven], b[proven], low[proven])
        flapping = {}
        nodes = len(set(a) | set(b))
        for node, (k, m, q) in blamed.items():
            if k >= 2 and binomial_tail(k, m, q) <= FAMILY_ALPHA / nodes:
                flapping[node] = (k, m)
        rows_low = shape[proven & low]
        for node, (k, m) in sorted(flapping.items(), key=lambda item: -item[1][0]):
            mine = rows_low[(rows_low.node_first == node) | (rows_low.node_last == node)]
            partners = [r.node_last if r.node_first == node else r.node_first for r in mine.itertuples()]
            out.append(Flag(FlagKind.INTERMITTENT, [frame.nodes[node]], [], row0.collective, int(row0.msg_bytes),
                            float(mine.busbw_gbps.min()), float(row0.peer_median),
                            f"intermittent node {frame.label(node)}: {row0.collective} slow in {k} of its {m} pairs "
                            f"(with {', '.join(frame.label(p) for p in partners[:4])}{', ...' if len(partners) > 4 else ''}),"
                            f" at the level of the fastest in the others ({row0.peer_median:.4g} GB/s)",
                            extra={"slow_pairs": k, "pairs": m}))
        for row in rows_low.itertuples():
            if row.node_first in flapping or row.node_last in flapping:
                continue  # the intermittent node's evidence
            nodes_ = [row.node_first, row.node_last]
            out.append(_flag(FlagKind.SLOW_PAIR, frame, row, nodes_, [], "slow node pair "
                             + " - ".join(frame.label(n) for n in nodes_)))
    return out


def uplink_flags(frame: Frame, shape: pd.DataFrame, low: np.ndarray, fast: set,
                 threshold: float) -> tuple[list[Flag], np.ndarray, np.ndarray]:
    """The shape's slow uplinks (analysis.uplinks) as flags, the pairs' ratios with those across
    a slow uplink taken against the level of their own kind (a slow node's pairs stay slow among them),
    and which pairs cross a slow uplink."""
    row0, ratio = shape.iloc[0], shape.ratio.to_numpy().copy()
    factor = np.ones(len(shape))  # the slowest uplink a pair crosses limits it (two in series: the slower)
    out = []
    for up in slow_uplinks(frame.leaves or {}, shape.node_first.to_numpy(), shape.node_last.to_numpy(), low,
                           shape.busbw_gbps.to_numpy(), fast, threshold, frame.parents):
        factor[up.across_mask] = np.minimum(factor[up.across_mask], up.factor)
        nodes = sorted(up.nodes, key=frame.label)
        what = f"slow uplink {up.switches[0]}" if len(up.switches) == 1 else \
            f"slow path between {' and '.join(up.switches)}"
        out.append(Flag(FlagKind.SLOW_UPLINK, frame.ips(nodes), [], row0.collective, int(row0.msg_bytes),
                        up.busbw_gbps, float(row0.peer_median),
                        f"{what}: its {up.across} {row0.collective} pairs across it run {up.busbw_gbps:.4g} GB/s (median; "
                        f"{up.low} below what the fastest of {int(row0.peers)} pairs deliver, {row0.peer_median:.4g}), "
                        f"its {up.inside} pairs inside at the others' level; its nodes "
                        f"{', '.join(frame.label(n) for n in nodes[:4])}{', ...' if len(nodes) > 4 else ''} "
                        "are not slow on their own", extra={"switches": list(up.switches), "slow_pairs": up.low,
                                                             "pairs": up.across}))
    return out, ratio / factor, factor < 1


def _blame(a: np.ndarray, b: np.ndarray, low: np.ndarray) -> dict[int, tuple[int, int, float]]:
    """Low pairs of nodes that both proved fast, blamed on the member whose pairs are low more often
    (both where as often): per node (blamed low pairs, pairs, the share of low pairs among the
    pairs of the other nodes: what noise and others' faults make)."""
    nodes = np.concatenate([a, b])
    lows = np.concatenate([low, low]).astype(int)
    count = pd.Series(np.ones(len(nodes), int)).groupby(nodes).sum()
    low_count = pd.Series(lows).groupby(nodes).sum()
    share = (low_count / count).to_dict()
    blamed: dict[int, int] = {}
    for x, y in zip(a[low], b[low]):
        sx, sy = share[x], share[y]
        for node in ((x,) if sx > sy else (y,) if sy > sx else (x, y)):
            blamed[node] = blamed.get(node, 0) + 1
    total, total_low = len(a), int(low.sum())
    out = {}
    for node, k in blamed.items():
        m, own_low = int(count[node]), int(low_count[node])
        out[node] = (k, m, max(total_low - own_low, 0.5) / max(total - m, 1))
    return out


def _gpu_pair_flags(frame: Frame, scores: pd.DataFrame, threshold: float) -> list[Flag]:
    """Pairs of GPUs inside each node: a node all of whose pairs are slow (its fabric), else each
    slow pair, and a GPU whose best pair is slow."""
    out = []
    for _, shape in scores.groupby(SHAPE, observed=True):
        slow = _slow(shape, threshold)
        for node, on_node in slow.groupby("node_first", observed=True):
            mine = shape[shape.node_first == node]
            row = on_node.iloc[0]
            best = _best_by_member(mine, "local_first", "local_last")
            floor = float(mine.floor.iloc[0])
            if len(on_node) == len(mine):
                out.append(_flag(FlagKind.SLOW_NODE, frame, row, [node], [], f"slow node {frame.label(node)} (every GPU "
                                 "pair inside it)"))
                out += _standing_out(frame, node, row, mine, best, floor, threshold)
                continue
            for pair in on_node.itertuples():
                gpus = [int(pair.local_first), int(pair.local_last)]
                out.append(_flag(FlagKind.SLOW_GPU_PAIR, frame, pair, [node], gpus,
                                 f"slow GPU pair {gpus[0]}-{gpus[1]} on {frame.label(node)}"))
            if len(best) > 2:  # with two GPUs, the pair cannot say which
                for gpu, ratio in best[_low(best, floor, threshold)].items():
                    out.append(_gpu_flag(frame, node, row, gpu, ratio, "of what the fastest pairs deliver"))
    return out


def _gpu_flag(frame: Frame, node: int, row, gpu, ratio: float, of_what: str) -> Flag:
    return Flag(FlagKind.SLOW_GPU, [frame.nodes[node]], [int(gpu)], row.collective, int(row.msg_bytes), None, None,
                f"slow GPU {gpu} on {frame.label(node)}: its best pair at {ratio:.0%} {of_what}",
                extra={"ratio": float(ratio)})


def _standing_out(frame: Frame, node: int, row, pairs: pd.DataFrame, best: pd.Series, floor: float,
                  threshold: float) -> list[Flag]:
    """In a node every GPU pair of which is slow, the GPUs slower still: by the bottleneck rule a fault
    of the node's fabric slows every pair alike, while a slow GPU holds back only its own pairs, so a
    GPU whose best pair falls below the best pair without it by more than the shape's noise allows is
    named too (three GPUs at least: with two, the pair cannot say which)."""
    if len(best) < 3:
        return []
    out = []
    for gpu, ratio in best.items():
        without = pairs[(pairs.local_first != gpu) & (pairs.local_last != gpu)].ratio.median()
        if without > 0 and _low(ratio / without, floor, threshold):
            out.append(_gpu_flag(frame, node, row, gpu, ratio / without, "of the best pair without it on its node"))
    return out


def _intra_flags(frame: Frame, scores: pd.DataFrame, threshold: float) -> list[Flag]:
    out = []
    for _, shape in scores.groupby(SHAPE, observed=True):
        for row in _slow(shape, threshold).itertuples():
            out.append(_flag(FlagKind.SLOW_NODE, frame, row, [row.node_first], [],
                             f"slow node {frame.label(row.node_first)} (its intra-node group of "
                             f"{int(row.world_size)} ranks)"))
    return out


def _group_flags(frame: Frame, shape: pd.DataFrame, threshold: float) -> list[Flag]:
    """inter, mixed, kbatch: a rail, or a node, all of whose groups are slow while others are
    not explains them; what nothing explains is named as the group and its nodes."""
    slow = _slow(shape, threshold)
    if slow.empty or len(slow) == len(shape):  # nothing slow, or everything: no peer to blame
        return []
    members = {i: frame.node_codes(i) for i in shape.index}
    slow_ids, explained, out = set(slow.index), set(), []
    if (shape.pattern == "inter").all() and (shape.local_first >= 0).all():
        for rail, groups in shape.groupby("local_first", observed=True):
            if set(groups.index) <= slow_ids:
                nodes = sorted({n for i in groups.index for n in members[i]})
                out.append(_flag(FlagKind.SLOW_RAIL, frame, slow.loc[groups.index].iloc[0], nodes, [int(rail)],
                                 f"slow rail {rail} (local rank {rail} on every node) across {len(nodes)} nodes"))
                explained |= set(groups.index)
    # A node all of whose groups are slow explains them, unless another node is in exactly the
    # same groups (then the groups cannot tell the two apart: they are named together below).
    groups_of: dict[int, frozenset[int]] = {}
    for i, nodes in members.items():
        for n in nodes:
            groups_of[n] = groups_of.get(n, frozenset()) | {i}
    suspects = {n: g for n, g in groups_of.items() if g <= slow_ids and not g <= explained}
    for node, groups in suspects.items():
        if sum(1 for other in suspects.values() if other == groups) == 1:
            row = slow.loc[sorted(groups)].iloc[0]
            out.append(_flag(FlagKind.SLOW_NODE, frame, row, [node], [], f"slow node {frame.label(node)}: every "
                             f"{row.pattern} group it is in is slow"))
            explained |= groups
    for i, row in slow.iterrows():
        if i not in explained:
            kind = FlagKind.SLOW_PAIR if len(members[i]) == 2 else FlagKind.SLOW_GROUP  # two nodes no other group separates
            out.append(_flag(kind, frame, row, members[i], [], f"slow {row.pattern} group of {int(row.world_size)} "
                             "ranks on " + ", ".join(frame.label(n) for n in members[i])))
    return out


def failures(frame: Frame) -> list[Flag]:
    bad = frame.df[frame.df.status != Status.OK]
    out = []
    for code, g in bad.groupby("group", sort=False, observed=True):
        i, gid = g.index[0], frame.group_id(int(code))
        row, lists = g.iloc[0], frame.lists(i)
        failed = lists["failed_ranks"] or []
        nodes = list(dict.fromkeys(lists["node_ips"][j] for j in failed)) or list(dict.fromkeys(lists["node_ips"]))
        out.append(Flag(FlagKind.FAILED_GROUP, nodes, [lists["ranks"][j] for j in failed], row.collective
                        if isinstance(row.collective, str) else None, None, None, None,
                        f"{row.status} group {gid} ({row.pattern}): {row.error}",
                        extra={"group_id": gid, "status": row.status, "rows": len(g)}))
    return out


def failure_table(flags_: list[Flag]) -> list[dict]:
    return [{"group_id": f.extra["group_id"], "status": f.extra["status"], "nodes": f.nodes, "failed_ranks": f.ranks,
             "rows": f.extra["rows"], "error": f.message.split(": ", 1)[1]} for f in flags_ if f.kind == FlagKind.FAILED_GROUP]
