"""Which regime a measured size is in: latency-bound (its time is mostly the fixed cost of a call,
barely growing with msg_bytes) or bandwidth-bound (mostly bytes on the wire). The two move by very
different amounts between runs: on a shared host latency-bound sizes move by factors (7-30x under
a busy core, benchmarks/data/performance_history_2026-12.md, from section 7.1), bandwidth-bound ones by tens of percent; so the judge
reads each regime's noise apart (judging/judge.py has a prior per regime). Pure numpy; no I/O.

The rule, per curve (one link's one collective, dtype, op and placement, every size it measured):
with t = latency + msg_bytes / rate, the rate is the curve's best (max msg_bytes / t), the latency
what its fastest sizes took beyond their own bytes at that rate (the median of its FASTEST
smallest such excesses), and a size is latency-bound where
its bytes at that rate take less time than the latency (its time is below about twice the
latency). Both are read at their best (the fastest size, the highest rate), because contention and
faults only ever slow a measurement: a noisy small size cannot pass for a bandwidth-bound one, nor
a slowed link's large sizes for latency-bound ones. A sweep that starts where bytes already
dominate (1-4 MiB over a shaped link: latency ~0) has no latency-bound size, and a curve of one
size is bandwidth-bound (nothing says otherwise).
"""

from __future__ import annotations

import enum

import numpy as np

FASTEST = 3  # a curve's latency is read from its fastest sizes, this many (all where it has fewer)


class Regime(enum.Enum):
    """What a size's time is mostly made of."""

    LATENCY = "latency"
    BANDWIDTH = "bandwidth"


def latency_bound(curve: np.ndarray, msg_bytes: np.ndarray, time_us: np.ndarray) -> np.ndarray:
    """For each measurement (`curve[i]`: a label of its curve, `msg_bytes[i]`, `time_us[i]`), whether
    it is latency-bound under the rule above. Non-positive or missing times are bandwidth-bound."""
    curve = np.asarray(curve)
    size = np.asarray(msg_bytes, dtype=float)
    t = np.asarray(time_us, dtype=float)
    valid = np.isfinite(t) & (t > 0) & (size > 0)
    if not valid.any():
        return np.zeros(len(t), dtype=bool)
    _, owner = np.unique(curve, return_inverse=True)
    k = owner.max() + 1
    best_rate = np.zeros(k)
    np.maximum.at(best_rate, owner[valid], size[valid] / t[valid])
    # the latency: what a curve's FASTEST fastest sizes took beyond their bytes at that rate, their
    # median (one lucky measurement does not set it)
    idx = np.flatnonzero(valid)
    idx = idx[np.lexsort((t[idx], owner[idx]))]  # by curve, fastest first
    first = np.r_[True, owner[idx][1:] != owner[idx][:-1]]
    rank = np.arange(len(idx)) - np.maximum.accumulate(np.where(first, np.arange(len(idx)), 0))
    fastest = np.full((k, FASTEST), np.nan)
    kept = idx[rank < FASTEST]
    fastest[owner[kept], rank[rank < FASTEST]] = t[kept] - size[kept] / best_rate[owner[kept]]
    with np.errstate(all="ignore"):
        latency = np.nan_to_num(np.nanmedian(fastest, axis=1), nan=-np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        bytes_us = size / best_rate[owner]
    # strictly below, with room for rounding: a curve without latency has no latency-bound size
    return valid & (bytes_us < latency[owner] * (1 - 1e-9))


def regimes(curve: np.ndarray, msg_bytes: np.ndarray, time_us: np.ndarray) -> np.ndarray:
    """latency_bound as each measurement's Regime value ("latency" / "bandwidth")."""
    return np.where(latency_bound(curve, msg_bytes, time_us), Regime.LATENCY.value, Regime.BANDWIDTH.value)
