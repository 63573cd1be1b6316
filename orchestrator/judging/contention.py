"""How contended a host was while a run measured, and how much wider that makes the run-to-run
spread a healthy value shows. Pure numpy; no I/O. The rows say it (workloads.contention): a rank's
CPU time and its threads' wait for a CPU over each size's measurement, the node's load and steal.

Oversubscription of a measurement: the CPU its ranks wanted against the CPU they got,
(cpu_busy_frac + cpu_wait_frac) / cpu_busy_frac: 1 where nothing else ran, more where another
process took the CPU its ranks wanted (on this 2-core host, 2.7-200 while another engineer's test
suite and benchmarks ran beside a busy loop, load 3.5-6.8 per CPU). A value measured at
oversubscription o spreads 1 + WIDEN_PER_OVERSUBSCRIPTION (o - 1) times wider about its level than
on a quiet host; a change between two measurements adds both sides' variances. The slope is
measured (docs/PERFORMANCE.md section 7): over 7 pairs of default sweeps (693 rows), the slope at
which the changes' size no longer grows with their rows' contention (Spearman's rank correlation
of |change| / widening with the widening: -0.01 for latency-bound sizes, -0.12 for bandwidth-bound).
A measurement beyond MAX_OVERSUBSCRIPTION says too little about its link (on this host rows measured
~20x oversubscribed moved 20x): it is not judged, and a comparison with such rows is inconclusive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from orchestrator.judging.judge import GROSS_DROP, GROSS_SIGMAS, PRIORS

WIDEN_PER_OVERSUBSCRIPTION = 0.25  # spread of one measurement at oversubscription o: (1 + this * (o - 1)) x
# Beyond this a measurement leaves even bandwidth-bound sizes (this host's prior, 0.30) too wide for
# the 3x rule (judge.gross_applies, two sides as contended): a 3x drop could be its noise, and it
# says more about the host than the link (1.9x oversubscribed).
MAX_OVERSUBSCRIPTION = 1 + (math.log(GROSS_DROP) / GROSS_SIGMAS / PRIORS[("gloo", False)].sigma_log - 1) \
    / WIDEN_PER_OVERSUBSCRIPTION
CONTENDED = 1.25  # a run's median beyond this is said in compare's summary (the judge widens from 1 on)


def oversubscription(cpu_busy_frac: np.ndarray, cpu_wait_frac: np.ndarray) -> np.ndarray:
    """The CPU a measurement's ranks wanted over the CPU they got (1: uncontended); NaN where unknown."""
    busy = np.asarray(cpu_busy_frac, dtype=float)
    wait = np.asarray(cpu_wait_frac, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        o = (busy + wait) / busy
    return np.where(np.isfinite(o) & (busy > 0), np.maximum(o, 1.0), np.nan)


def spread_factor(oversub: np.ndarray) -> np.ndarray:
    """How many times wider one measurement's run-to-run spread is at its oversubscription (1 where unknown)."""
    o = np.nan_to_num(np.asarray(oversub, dtype=float), nan=1.0)
    return 1.0 + WIDEN_PER_OVERSUBSCRIPTION * (np.maximum(o, 1.0) - 1.0)


def too_contended(oversub_base: np.ndarray, oversub_new: np.ndarray) -> np.ndarray:
    """Whether either side of a change was measured beyond MAX_OVERSUBSCRIPTION (unknown: no)."""
    worst = np.fmax(np.asarray(oversub_base, dtype=float), np.asarray(oversub_new, dtype=float))
    return np.nan_to_num(worst, nan=1.0) > MAX_OVERSUBSCRIPTION


def widening(oversub_base: np.ndarray, oversub_new: np.ndarray, runs_base: np.ndarray | int = 1) -> np.ndarray:
    """How many times wider a change (the new measurement against the mean of `runs_base` baseline
    ones) spreads than between uncontended ones: both sides' variances added, against uncontended sides'."""
    k = np.maximum(np.asarray(runs_base, dtype=float), 1.0)
    return np.sqrt((spread_factor(oversub_new) ** 2 + spread_factor(oversub_base) ** 2 / k) / (1 + 1 / k))


@dataclass(frozen=True)
class RunLoad:
    """How contended one run's hosts were, the medians over its measurements (None: not recorded)."""

    run_id: str
    oversubscription: float | None
    cpu_wait_frac: float | None
    load_per_cpu: float | None
    steal_frac: float | None

    @property
    def contended(self) -> bool:
        return self.oversubscription is not None and self.oversubscription > CONTENDED

    def describe(self) -> str:
        """"run R measured with its ranks 1.8x oversubscribed (they waited for a CPU 80% of the
        time they ran; load 1.6 per CPU; steal 2%)"."""
        if self.oversubscription is None:
            return f"run {self.run_id}: contention not recorded"
        parts = []
        if self.cpu_wait_frac is not None:
            parts.append(f"its threads waited for a CPU {self.cpu_wait_frac:.0%} of the wall time")
        if self.load_per_cpu is not None:
            parts.append(f"load {self.load_per_cpu:.1f} per CPU")
        if self.steal_frac:
            parts.append(f"steal {self.steal_frac:.0%}")
        return (f"run {self.run_id} measured with its ranks {self.oversubscription:.1f}x oversubscribed"
                + (f" ({'; '.join(parts)})" if parts else ""))


def run_load(run_id: str, busy: np.ndarray, wait: np.ndarray, load: np.ndarray, steal: np.ndarray) -> RunLoad:
    """A run's RunLoad from its rows' contention columns (NaN where a row has none)."""
    def median(x) -> float | None:
        x = np.asarray(x, dtype=float)
        x = x[np.isfinite(x)]
        return float(np.median(x)) if len(x) else None

    return RunLoad(run_id, median(oversubscription(busy, wait)), median(wait), median(load), median(steal))
