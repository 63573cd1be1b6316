"""Stragglers: the ranks (and nodes) the others wait for. Pure.

In a collective whose members all finish together (registry: finishes_together), a rank that
arrives late waits for nobody: its own time is the shortest of its group, and the others' times
hold its lateness. So each rank's own mean time (`rank_time_us`) is set against the median of the
other members of its row (leave one out), in log space; a rank's score is the median of that ratio
over every row it is in, with how often it was its row's shortest ("arrived last") and the
median time the others waited for it (their median time less its own). The scores of all ranks are
then read by the one judge (judging.judge.peer_arrays): a rank straggles when its score is low
against the other ranks' scores beyond their noise and the report's threshold, on at least MIN_ROWS
rows. Nodes likewise, from every rank entry on them: a node whose ranks arrive late in many groups
is a flag of its own (CPU contention, a slow host path to its devices), needing MIN_VALUES nodes.

The prior is the spread of a healthy rank's score among its peers, set wider than measured (the lab's
entries 3.4-5.2%, scores over 45-54 rows within 1%: docs/PERFORMANCE.md, section 11); data from many
ranks outweighs it. A rank starved of CPU on gloo is not late but slow, and slows its whole group:
the pair flags find it (slow_gpu), not this rule.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from orchestrator.analysis.diagnosis import Flag, FlagKind
from orchestrator.analysis.frame import Frame
from orchestrator.analysis.scores import ok_rows, where
from orchestrator.judging.judge import MIN_VALUES, Prior, grouped_leave_one_out_medians, peer_arrays
from workloads import registry

MIN_ROWS = 3  # a rank is named on evidence from several rows, never on one measurement
# A healthy rank's score (the median over its rows of log(own time / its peers' median)) about the
# other ranks' scores. Measured: docs/PERFORMANCE.md, section "Stragglers".
PRIOR = Prior("rank-arrival", 0.10, 8.0, "lab, gloo: a healthy entry within 3.4-5.2% (robust sigma) of its peers'")


def flags(frame: Frame, threshold: float, top: int = 10) -> list[Flag]:
    """Straggler flags of ranks (kind "straggler") and nodes ("straggler_node"), worst first."""
    scored = scores(frame)
    if scored is None:
        return []
    ranks, nodes = scored
    out = _flagged(ranks, threshold, top, lambda r: _rank_flag(frame, r))
    out += _flagged(nodes, threshold, top, lambda r: _node_flag(frame, r))
    return out


def scores(frame: Frame) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """Per rank and per node: score (ratio), rows, last (rows where it was the shortest), wait_us,
    and the judge's floor; None where no row of a collective that finishes together has per-rank
    times of two ranks or more."""
    together = [name for name in registry.names() if registry.get(name).finishes_together]
    d = ok_rows(frame.df)
    d = where(d, d.collective.isin(together) & (d.world_size >= 2))
    if d.empty:
        return None
    row, rank, t, node = frame.rank_times(d.index.to_numpy())
    good = np.isfinite(t) & (t > 0)
    row, rank, t, node = row[good], rank[good], t[good], node[good]
    ref = grouped_leave_one_out_medians(row, t)
    has_peers = np.isfinite(ref) & (ref > 0)
    row, rank, t, node, ref = row[has_peers], rank[has_peers], t[has_peers], node[has_peers], ref[has_peers]
    if not len(t):
        return None
    starts = np.r_[0, np.flatnonzero(row[1:] != row[:-1]) + 1]  # entries come row by row
    shortest = np.repeat(np.minimum.reduceat(t, starts), np.diff(np.r_[starts, len(t)]))
    entries = {"row": row, "node": node, "log_ratio": np.log(t / ref), "last": t <= shortest, "wait_us": ref - t}
    return _judged(entries, rank), _judged(entries, node)


def _judged(e: dict, key: np.ndarray) -> pd.DataFrame:
    """Per key (a rank, a node): the median log ratio and wait, the rows it is in and those where
    it arrived last (a row counted once however many of its ranks were there), and the judge's verdict."""
    keys, dense = _dense(key)
    by_code = pd.Categorical.from_codes(dense, categories=np.arange(len(keys)))  # grouped by the codes: no hashing
    medians = pd.DataFrame({"log_ratio": e["log_ratio"], "wait_us": e["wait_us"]}).groupby(
        by_code, observed=True).median()
    first = np.full(len(keys), len(key))
    np.minimum.at(first, dense, np.arange(len(key)))  # each key's first entry
    out = pd.DataFrame({"log_score": medians.log_ratio.to_numpy(), "rows": _distinct_rows(key, e["row"], keys),
                        "last": _distinct_rows(key[e["last"]], e["row"][e["last"]], keys),
                        "wait_us": medians.wait_us.to_numpy(), "row": e["row"][first], "node": e["node"][first]},
                       index=keys)
    out["ratio"] = np.exp(out.log_score)
    if len(out) >= MIN_VALUES:
        judged = peer_arrays(out.ratio.to_numpy(), PRIOR)
        out["reference"], out["floor"] = judged.reference, judged.floor
    else:
        out["reference"], out["floor"] = np.nan, 0.0  # which of two is late cannot be said
    return out


def _dense(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct keys (small non-negative integers: ranks, node codes) and each entry's
    index among them, by counting (no sort)."""
    present = np.bincount(key) > 0
    return np.flatnonzero(present), (np.cumsum(present) - 1)[key]


def _distinct_rows(key: np.ndarray, row: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """How many distinct rows each of `keys` (sorted, non-negative) has entries in."""
    if not len(key):
        return np.zeros(len(keys), dtype=int)
    span = int(max(key.max(), keys.max())) + 1
    # entries come row by row: the codes are nearly sorted already, which a stable sort runs through
    code = np.sort(row.astype(np.int64) * span + key, kind="stable")
    first = np.r_[True, code[1:] != code[:-1]]  # one per (row, key)
    return np.bincount(code[first] % span, minlength=span)[keys]


def _flagged(scored: pd.DataFrame, threshold: float, top: int, make) -> list[Flag]:
    low = scored[(scored.ratio < scored.floor) & (scored.ratio < 1 - threshold) & (scored.rows >= MIN_ROWS)]
    return [make((key, r)) for key, r in low.sort_values("ratio").head(top).iterrows()]


def _evidence(r) -> str:
    return (f"arrived last in {int(r['last'])} of {int(r.rows)} rows; its own time is {r.ratio:.2f}x its peers' "
            f"(median), the others waited a median {r.wait_us:.0f} us for it (the other ranks' scores: "
            f"{r.reference:.2f}x, judged low below {r.floor:.2f}x)")


def _rank_flag(frame: Frame, item) -> Flag:
    rank, r = item
    lists = frame.lists(int(r.row))
    j = lists["ranks"].index(int(rank))
    where = f"{lists['hosts'][j]} ({lists['node_ips'][j]})"
    return Flag(FlagKind.STRAGGLER, [lists["node_ips"][j]], [int(rank)], None, None, float(r.ratio), float(r.reference),
                f"straggler: rank {rank} on {where}: " + _evidence(r),
                extra={"rows": int(r.rows), "arrived_last": int(r["last"]), "wait_us": float(r.wait_us)})


def _node_flag(frame: Frame, item) -> Flag:
    code, r = item
    ip = frame.ips([int(code)])[0]
    return Flag(FlagKind.STRAGGLER_NODE, [ip], [], None, None, float(r.ratio), float(r.reference),
                f"straggler node: {frame.label(int(code))}'s ranks " + _evidence(r),
                extra={"rows": int(r.rows), "arrived_last": int(r["last"]), "wait_us": float(r.wait_us)})
