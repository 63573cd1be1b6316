"""Each group's score against its shape's healthy level: one row per group at its shape's largest
size, with the level (judging/capacity.py), the judge's floor and, where the shape's rates hold a
slower mode apart from the level's, its size and the level mode's lowest ratio; and what a run can
say where nothing is flagged (`agreement`). Pure functions of a run's rows; the flag rules that
read the scores are analysis.diagnosis'."""

from __future__ import annotations

import numpy as np
import pandas as pd

from orchestrator.analysis import grouping
from orchestrator.judging.capacity import healthy_level
from orchestrator.judging.judge import prior_for
from orchestrator.sweep.sizes import format_bytes
from workloads.messages import Status

SHAPE = ["collective", "dtype", "op", "in_place", "pattern", "world_size", "ranks_per_node"]
# the columns the flags read of a group's row
_SCORED = list(dict.fromkeys([*SHAPE, "msg_bytes", "topology", "backend", "busbw_gbps", "group", "node_first",
                              "node_last", "local_first", "local_last"]))


def where(df: pd.DataFrame, mask) -> pd.DataFrame:
    """df[mask], or df itself where the mask keeps every row (most of a run's rows are ok and of its
    one collective: a million rows are not copied to keep them all). Callers never write into it."""
    return df if bool(np.all(mask)) else df[mask]


def ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    return where(df, df.status == Status.OK)


def shape_scores(df: pd.DataFrame) -> pd.DataFrame:
    """One row per group at its shape's largest size: busbw, the shape's healthy level (`peer_median`,
    the name the flags' JSON has always had), the group count, the ratio to the level, the judge's
    floor, and the groups in slower modes apart from the level's with the level mode's lowest ratio
    (`below`, `mode_floor`: 0 where none); the frame's row index is kept, to look up the group's nodes."""
    d = ok_rows(df)
    if d.empty:
        return d.assign(peers=[], peer_median=[], ratio=[], floor=[], below=[], mode_floor=[])
    shape, n = grouping.codes(d, SHAPE)
    sizes = d.msg_bytes.to_numpy()
    at_top = shape >= 0  # a row with a null key is in no shape
    at_top[at_top] = sizes[at_top] == grouping.maxima(shape, sizes, n)[shape[at_top]]  # its shape's largest size
    at_top = grouping.firsts(d.group.to_numpy(), at_top)  # one row per group
    top = where(d[[c for c in _SCORED if c in d]], at_top)
    shape = pd.factorize(shape[at_top])[0]  # numbered in the order the shapes first appear
    peers = np.bincount(shape, minlength=1)
    busbw, reference, floor, below, mode_floor = top.busbw_gbps.to_numpy(), *np.zeros((4, len(top)))
    m = len(top)  # every group judged in this report: the family of the judge's error rate
    order = np.argsort(shape, kind="stable")
    for rows in np.split(order, np.cumsum(peers)[:-1]):
        if not len(rows):  # no shape: every ok row has a null key
            continue
        first = top.iloc[rows[0]]
        level = healthy_level(busbw[rows], prior_for(first.get("backend"), first.topology != "intra"), m)
        if level is None:  # no positive busbw: nothing to judge
            reference[rows], floor[rows] = np.nan, 0.0
            continue
        reference[rows], floor[rows], below[rows], mode_floor[rows] = (level.reference, level.floor, level.below,
                                                                       level.mode_floor)
    return top.assign(peers=peers[shape], peer_median=reference, ratio=busbw / reference, floor=floor,
                      below=below.astype(int), mode_floor=mode_floor)


def agreement(scores: pd.DataFrame) -> str | None:
    """Nothing slow among peers: one line on the widest shape that spans nodes (pairwise where the run
    has it; the most groups) and its level, and that only an expected value tells a healthy fabric
    from one equally slow."""
    across = scores[scores.pattern == "pairwise"]  # every node measured with every other
    across = across if len(across) else scores[scores.topology != "intra"]
    if across.empty:
        return None
    widest = across.groupby(SHAPE, observed=True).size().idxmax()
    shape = across.set_index(SHAPE).loc[[widest]].reset_index() if len(SHAPE) > 1 else across
    row = shape.iloc[0]
    nodes = len(set(shape.node_first) | set(shape.node_last))
    what = f"{row.collective} {format_bytes(int(row.msg_bytes))} {row.pattern}"
    if row.below:  # a slower mode apart from the level, yet no node or pair named: not agreement
        return (f"cannot tell which nodes are slow: {what}: {int(row.below)} of {int(row.peers)} groups form a slower "
                f"mode apart from the level of the fastest ({row.peer_median:.4g} GB/s), but none is below its noise "
                "floor; measure again (more iterations, or qualify) or declare an expected value (--expected FILE)")
    return (f"all {nodes} nodes agree: {what} at {row.peer_median:.4g} GB/s, the slowest of its {int(row.peers)} "
            f"groups {max(1 - float(shape.ratio.min()), 0.0):.0%} below it (a fault under the noise floor, "
            f"{1 - row.floor:.0%}, is not resolved); a fabric equally slow everywhere reads the same: where no expected "
            "value covers the platform, declare one (--expected FILE)")
