"""What a user reads out of a run: intra vs inter tables, and the flags an operator gates on.
Pure functions of a `Frame` (one run's rows); no Ray, no I/O.

Size: over 300 lines for the tables and one flag rule per pattern (pairs, GPU pairs, intra,
rails and groups, failures), each small and pure.

Every group is compared with its peers of the same shape (collective, dtype, op, placement,
pattern, world size, ranks per node) at the largest size the shape measured, through the one
judge (judging/judge.py): with at least three groups, one is slow when its busbw is more than
`threshold` below the median of the others AND lower than their spread, pooled with the
platform's prior, lets a healthy group fall (a 3x drop always is); the slowness is named where it
can be placed:
- pairwise (and 2-rank inter) groups: the slow node pair, and a node whose pairs are slow;
- intra-pairwise groups: the slow GPU pair of a node, and a GPU whose pairs are slow;
- intra groups: their node;
- inter groups (rail-aligned): a rail all of whose groups are slow, or a node all of whose
  groups are slow; otherwise the group and its nodes;
- mixed and kbatch groups: the group and its nodes.
Failed, timed-out and skipped groups are flagged too; stragglers (the ranks the others wait for)
are analysis.stragglers'.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np
import pandas as pd

from orchestrator.analysis import grouping
from orchestrator.analysis.frame import Frame
from orchestrator.judging.judge import MIN_VALUES, peer_arrays, prior_for
from orchestrator.sweep.sizes import format_bytes
from workloads.messages import Status, Topology

TOPOLOGIES = (Topology.INTRA.value, Topology.INTER.value, Topology.MIXED.value)  # every report's columns
DOMAIN = Topology.INTRA_DOMAIN.value  # a column only where rows have it (NVLink domains across nodes)


def topologies(df: pd.DataFrame) -> tuple[str, ...]:
    """The topology columns of `df`'s tables: intra, inter, mixed, and intra-domain where it has any."""
    return TOPOLOGIES + ((DOMAIN,) if "topology" in df and (df.topology == DOMAIN).any() else ())
SHAPE = ["collective", "dtype", "op", "in_place", "pattern", "world_size", "ranks_per_node"]
# the columns the flags read of a group's row
_SCORED = list(dict.fromkeys([*SHAPE, "msg_bytes", "topology", "backend", "busbw_gbps", "group", "node_first",
                              "node_last", "local_first", "local_last"]))
MIN_PEERS = MIN_VALUES


@dataclass(frozen=True)
class Flag:
    """One finding: `kind` (slow_pair, slow_node, slow_group, slow_rail, slow_gpu_pair, slow_gpu,
    straggler, straggler_node, failed_group, below_expected), where (node IPs; ranks: local GPU indices for GPU
    kinds and rails, global ranks for stragglers and failures), what and by how much."""

    kind: str
    nodes: list[str]
    ranks: list[int]
    collective: str | None
    msg_bytes: int | None
    value: float | None  # the measurement (busbw GB/s, or time ratio for stragglers)
    reference: float | None  # what it is compared with (peers' median, expected value)
    message: str
    source: str | None = None  # where the reference comes from (expected values)
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        # not dataclasses.asdict: it deep-copies every field, a second per 10,000 flags
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        return {**out, "nodes": list(self.nodes), "ranks": list(self.ranks), **self.extra}


def where(df: pd.DataFrame, mask) -> pd.DataFrame:
    """df[mask], or df itself where the mask keeps every row (most of a run's rows are ok and of its
    one collective: a million rows are not copied to keep them all). Callers never write into it."""
    return df if bool(np.all(mask)) else df[mask]


def ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    return where(df, df.status == Status.OK)


# -- tables -----------------------------------------------------------------------------------
def by_size(df: pd.DataFrame, collective: str, value: str) -> list[dict]:
    """`value` (busbw_gbps or time_us) by msg_bytes per topology, the widest group of each."""
    d = ok_rows(df)
    d = where(d, d.collective == collective)
    d = where(d, d.world_size == d.groupby("topology", observed=True).world_size.transform("max"))
    table = d.groupby(["msg_bytes", "topology"], observed=True)[value].median().unstack("topology")
    rows = []
    for size, rec in table.iterrows():
        row = {"collective": collective, "msg_bytes": int(size), "size": format_bytes(int(size))}
        for t in topologies(d):
            v = rec.get(t)
            row[t] = float(v) if v is not None and v == v else None
        rows.append(row)
    return rows


def peaks(df: pd.DataFrame, collective: str, busbw: list[dict]) -> list[dict]:
    """Per topology (widest group): the peak busbw and the smallest size reaching half of it, from
    `by_size(df, collective, "busbw_gbps")`."""
    out = []
    series = {}
    for row in busbw:
        for t in (*TOPOLOGIES, DOMAIN):
            if row.get(t) is not None:
                series.setdefault(t, []).append((row["msg_bytes"], row[t]))
    d = ok_rows(df)
    d = where(d, d.collective == collective)
    for t, points in series.items():
        peak = max(v for _, v in points)
        half = min(s for s, v in points if v >= peak / 2)
        out.append({"collective": collective, "topology": t, "world_size": int(d[d.topology == t].world_size.max()),
                    "peak_busbw": peak, "half_peak_bytes": half, "half_peak_size": format_bytes(half)})
    return out


def precision(df: pd.DataFrame, collective: str) -> list[dict]:
    """Time and busbw across dtypes at equal element counts (the widest group measured), so the
    effect of fewer bytes per element is read off, measured rather than assumed."""
    d = ok_rows(df)
    d = where(d, d.collective == collective)
    if d.dtype.nunique() < 2:
        return []
    d = d[d.world_size == d.world_size.max()]
    agg = d.groupby(["count", "dtype"], observed=True).agg(
        msg_bytes=("msg_bytes", "first"), time_us=("time_us", "median"), busbw=("busbw_gbps", "median")).reset_index()
    shared = agg.groupby("count", observed=True).dtype.transform("nunique") >= 2
    agg = agg[shared].sort_values(["count", "msg_bytes"])
    return [{"collective": collective, "count": int(r["count"]), "dtype": r["dtype"], "msg_bytes": int(r.msg_bytes),
             "time_us": float(r.time_us), "busbw": float(r.busbw)} for _, r in agg.iterrows()]


# -- flags ------------------------------------------------------------------------------------
def shape_scores(df: pd.DataFrame) -> pd.DataFrame:
    """One row per group at its shape's largest size: busbw, the peers' median, their count and
    the ratio to it (the frame's row index is kept, to look up the group's nodes)."""
    d = ok_rows(df)
    if d.empty:
        return d.assign(peers=[], peer_median=[], ratio=[])
    shape, n = grouping.codes(d, SHAPE)
    sizes = d.msg_bytes.to_numpy()
    at_top = shape >= 0  # a row with a null key is in no shape
    at_top[at_top] = sizes[at_top] == grouping.maxima(shape, sizes, n)[shape[at_top]]  # its shape's largest size
    at_top = grouping.firsts(d.group.to_numpy(), at_top)  # one row per group
    top = where(d[[c for c in _SCORED if c in d]], at_top)
    shape = pd.factorize(shape[at_top])[0]  # numbered in the order the shapes first appear
    peers = np.bincount(shape, minlength=1)
    busbw, reference, ratio, floor = top.busbw_gbps.to_numpy(), *np.zeros((3, len(top)))
    m = len(top)  # every group judged in this report: the family of the judge's error rate
    order = np.argsort(shape, kind="stable")
    for rows in np.split(order, np.cumsum(peers)[:-1]):
        if not len(rows):  # no shape: every ok row has a null key
            continue
        first = top.iloc[rows[0]]
        prior = prior_for(first.get("backend"), first.topology != "intra")
        # each group against the others' median (leave one out) and the floor of their spread
        judged = peer_arrays(busbw[rows], prior, m)
        reference[rows], ratio[rows], floor[rows] = judged.reference, judged.ratio, judged.floor
    return top.assign(peers=peers[shape], peer_median=reference, ratio=ratio, floor=floor)


def flags(frame: Frame, threshold: float) -> list[Flag]:
    df = frame.df
    scores = shape_scores(df)
    scores = scores[scores.peers >= MIN_PEERS]
    out: list[Flag] = []
    out += _pair_flags(frame, scores[scores.pattern == "pairwise"], threshold)
    out += _gpu_pair_flags(frame, scores[scores.pattern == "intra-pairwise"], threshold)
    out += _intra_flags(frame, scores[scores.pattern == "intra"], threshold)
    rest = scores[~scores.pattern.isin(["pairwise", "intra-pairwise", "intra"])]
    for _, shape in rest.groupby(SHAPE, observed=True):
        out += _group_flags(frame, shape, threshold)
    out = _merge(out)
    out += failures(frame)
    return out


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
    return scores[(scores.ratio < 1 - threshold) & (scores.ratio < scores.floor)].sort_values("ratio")


def _msg(row, what: str) -> str:
    return (f"{what}: {row.collective} {format_bytes(int(row.msg_bytes))} busbw {row.busbw_gbps:.4g} GB/s, "
            f"{1 - row.ratio:.0%} below the median {row.peer_median:.4g} of its {int(row.peers) - 1} peer groups "
            f"(noise floor {1 - row.floor:.0%})")


def _flag(kind, frame: Frame, row, nodes, ranks, what: str) -> Flag:
    return Flag(kind, frame.ips(nodes), list(ranks), row.collective, int(row.msg_bytes), float(row.busbw_gbps),
                float(row.peer_median), _msg(row, what))


def _by_member(scores: pd.DataFrame, a: str, b: str, threshold: float) -> pd.Series:
    """Median ratio of every member (node or GPU) over the groups it is in (columns a, b), where it
    is below the threshold and the judge's floor (the shape's median floor)."""
    both = pd.concat([scores[[a, "ratio"]].rename(columns={a: "m"}), scores[[b, "ratio"]].rename(columns={b: "m"})])
    per = both.groupby("m", observed=True).ratio.median()
    floor = float(scores.floor.median()) if len(scores) else 0.0
    return per[(per < 1 - threshold) & (per < floor)]


def _pair_flags(frame: Frame, scores: pd.DataFrame, threshold: float) -> list[Flag]:
    out = []
    for _, shape in scores.groupby(SHAPE, observed=True):
        for row in _slow(shape, threshold).itertuples():
            nodes = [row.node_first, row.node_last]
            out.append(_flag("slow_pair", frame, row, nodes, [], "slow node pair "
                             + " - ".join(frame.label(n) for n in nodes)))
        per_node = _by_member(shape, "node_first", "node_last", threshold)
        for node, ratio in per_node.sort_values().items():
            row = shape.iloc[0]
            out.append(Flag("slow_node", [frame.nodes[node]], [], row.collective, int(row.msg_bytes), None, None,
                            f"slow node {frame.label(node)}: its {row.collective} pairs at a median "
                            f"{ratio:.0%} of their peers'", extra={"ratio": float(ratio)}))
    return out


def _gpu_pair_flags(frame: Frame, scores: pd.DataFrame, threshold: float) -> list[Flag]:
    """Pairs of GPUs inside each node: a node all of whose pairs are slow (its fabric), else each
    slow pair, and a GPU all of whose pairs are slow."""
    out = []
    for _, shape in scores.groupby(SHAPE, observed=True):
        slow = _slow(shape, threshold)
        for node, on_node in slow.groupby("node_first", observed=True):
            mine = shape[shape.node_first == node]
            row = on_node.iloc[0]
            if len(on_node) == len(mine):
                out.append(_flag("slow_node", frame, row, [node], [], f"slow node {frame.label(node)} (every GPU "
                                 "pair inside it)"))
                continue
            for pair in on_node.itertuples():
                gpus = [int(pair.local_first), int(pair.local_last)]
                out.append(_flag("slow_gpu_pair", frame, pair, [node], gpus,
                                 f"slow GPU pair {gpus[0]}-{gpus[1]} on {frame.label(node)}"))
            per_gpu = _by_member(mine, "local_first", "local_last", threshold)
            gpus_of_node = set(mine.local_first) | set(mine.local_last)
            for gpu, ratio in per_gpu.items():
                if len(gpus_of_node) > 2:  # with two GPUs, the pair cannot say which
                    out.append(Flag("slow_gpu", [frame.nodes[node]], [int(gpu)], row.collective, int(row.msg_bytes),
                                    None, None, f"slow GPU {gpu} on {frame.label(node)}: its pairs at a median "
                                    f"{ratio:.0%} of their peers'", extra={"ratio": float(ratio)}))
    return out


def _intra_flags(frame: Frame, scores: pd.DataFrame, threshold: float) -> list[Flag]:
    out = []
    for _, shape in scores.groupby(SHAPE, observed=True):
        for row in _slow(shape, threshold).itertuples():
            out.append(_flag("slow_node", frame, row, [row.node_first], [],
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
                out.append(_flag("slow_rail", frame, slow.loc[groups.index].iloc[0], nodes, [int(rail)],
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
            out.append(_flag("slow_node", frame, row, [node], [], f"slow node {frame.label(node)}: every "
                             f"{row.pattern} group it is in is slow"))
            explained |= groups
    for i, row in slow.iterrows():
        if i not in explained:
            kind = "slow_pair" if len(members[i]) == 2 else "slow_group"  # two nodes no other group separates
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
        out.append(Flag("failed_group", nodes, [lists["ranks"][j] for j in failed], row.collective
                        if isinstance(row.collective, str) else None, None, None, None,
                        f"{row.status} group {gid} ({row.pattern}): {row.error}",
                        extra={"group_id": gid, "status": row.status, "rows": len(g)}))
    return out


def failure_table(flags_: list[Flag]) -> list[dict]:
    return [{"group_id": f.extra["group_id"], "status": f.extra["status"], "nodes": f.nodes, "failed_ranks": f.ranks,
             "rows": f.extra["rows"], "error": f.message.split(": ", 1)[1]} for f in flags_ if f.kind == "failed_group"]
