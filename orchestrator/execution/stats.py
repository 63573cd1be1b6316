"""Combining ranks into one row's figures, and the bandwidth arithmetic. Pure functions.

Per iteration, a collective is as slow as its slowest rank; `time_us` is the mean over the
timed iterations of that per-iteration maximum. GB/s means 1e9 bytes per second.
"""

from __future__ import annotations

import numpy as np


def algbw_gbps(msg_bytes: int, time_us: float) -> float:
    """Bytes per microsecond / 1e3 = 1e9 bytes per second."""
    return msg_bytes / time_us / 1e3


def busbw_gbps(algbw: float, factor: float) -> float:
    return algbw * factor


def combine(rank_samples: list[list[float]]) -> dict:
    """Per-rank per-iteration times (microseconds) -> the timing columns of one row."""
    per_rank = np.asarray(rank_samples, dtype=np.float64)  # ranks x iterations
    slowest = per_rank.max(axis=0)
    mean = float(slowest.mean())
    return {
        "time_us": mean,
        "time_us_p50": float(np.percentile(slowest, 50)),
        "time_us_p99": float(np.percentile(slowest, 99)),
        "time_us_min": float(slowest.min()),
        "time_us_max": float(slowest.max()),
        "time_cv": float(slowest.std() / mean) if mean > 0 else 0.0,
        "iter_time_us": slowest.tolist(),
        "rank_time_us": per_rank.mean(axis=1).tolist(),
    }
