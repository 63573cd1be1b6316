"""How contended a host was while a run measured, and how much wider that makes the run-to-run
spread a healthy value shows. Pure numpy; no I/O. The rows say it (workloads.contention): a rank's
CPU time and its threads' wait for a CPU over each size's measurement, the node's load and steal.

Oversubscription of a measurement: the CPU its ranks wanted against the CPU they got,
(cpu_busy_frac + cpu_wait_frac) / cpu_busy_frac: 1 where nothing else ran, more where another
process took the CPU its ranks wanted. On this 2-core host it was 2.3-220 (run medians 3.6-26)
while a busy loop and another engineer's tests ran: Ray starts its workers at nice 15, so any
process at nice 0 takes their CPU first.

A CPU-bound measurement given 1/o of the CPU it wanted spreads o times wider (spread_factor): over
27 pairs of default sweeps (2,673 rows, 2.3-220x), the changes of latency-bound sizes each scaled
so no longer grow with their rows' contention (Spearman's rank correlation of |change| / widening
with the widening -0.13 and -0.07 in the two sets; +0.07 and +0.08 at o ** 0.75); bandwidth-bound
ones would take o ** 0.5 (-0.28 at o ** 1): the one exponent errs toward fewer alarms for them
(docs/PERFORMANCE.md section 7). Not every measurement is CPU-bound: a lab's shaped links measured
4x oversubscribed repeat within 2%, the link setting their time. So compare (analysis/compare.py)
reads the level of a comparison's noise from its rows, scales each row by its contention relative
to its family's, and widens the quiet-host prior only where the CPU bounds the time (cpu_bound).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WIDEN_EXPONENT = 1.0  # spread of one measurement at oversubscription o: o ** this times a quiet host's
CONTENDED = 1.25  # a run's median beyond this is said in compare's summary, and can make it inconclusive


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
    return np.maximum(o, 1.0) ** WIDEN_EXPONENT


def cpu_bound(backend: str | None, topology: str, latency_bound: bool) -> bool:
    """Whether the CPU a measurement got bounds its time: gloo inside a node (the CPU copies the
    bytes) and latency-bound sizes anywhere (a call's fixed cost is CPU and scheduler time); not a
    bandwidth-bound size over a network or a GPU fabric."""
    return latency_bound or ((backend or "gloo") == "gloo" and topology == "intra")


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
