"""Latency-bandwidth fits `time = alpha + bytes / bandwidth`, and the one rule that says
whether a fit is good enough to show (report) or to predict from (predict). Pure."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from orchestrator.analysis.scores import ok_rows, where
from orchestrator.sweep.sizes import format_bytes
from workloads.messages import Status

# A size's fitted time may be this far off, or as far as its own iterations spread (p99 over the
# fastest, less one) where that is more, up to MAX_TOLERANCE: a noisy host's sizes wander by that
# much from run to run; beyond 75% a cliff (flat, then 100x) would pass for a line
# (benchmarks/fit_acceptance.py).
MIN_TOLERANCE = 0.5
MAX_TOLERANCE = 0.75
MEDIAN_TOLERANCE = 0.3
NEGATIVE_ALPHA = 0.5  # of the fastest size's time


@dataclass(frozen=True)
class Fit:
    """time_us = alpha_us + msg_bytes / (bandwidth_gbps * 1e3), with how well it fits."""

    alpha_us: float
    bandwidth_gbps: float  # algorithm bandwidth: bytes moved per second / 1e9
    r2: float
    max_rel_err: float
    points: int
    median_rel_err: float = 0.0
    worst_bytes: int | None = None  # the size furthest beyond its tolerance, if one is
    worst_rel_err: float = 0.0
    worst_tolerance: float = MIN_TOLERANCE
    min_time_us: float = 0.0  # the fastest size's time
    dropped_bytes: int | None = None  # a size left out as delayed (robust_fit), said in the report
    dropped_rel_err: float = 0.0  # how much slower than the fit it was

    @property
    def reason(self) -> str | None:
        """Why the fit is not accepted, or None. The acceptance rule: at least 3 sizes, a latency
        not below minus half the fastest size's time (an intercept, where the sizes fitted are all
        bandwidth-bound), positive bandwidth, the median size within 30% and every size within 50% or within
        its own iterations' spread where that is wider (a noisy host's healthy sizes pass; a model
        that does not hold misses sizes by more than they vary), each either way alike (off_by: a
        size twice as slow as the line is 100% off, as one twice as fast). R^2 is reported, not judged: on
        the relative errors the fit minimises it says less than they do. robust_fit may leave
        one delayed size out first."""
        if self.points < 3:
            return f"only {self.points} size(s)"
        if not self.bandwidth_gbps > 0:
            return "time does not grow with size"
        # bandwidth-bound sizes put alpha near 0, either side; a shaper's burst or a cache makes the
        # smaller sizes faster than the line through the larger: an intercept below 0, not a latency
        if self.alpha_us < -NEGATIVE_ALPHA * self.min_time_us:
            return (f"negative latency ({self.alpha_us:.3g} us, more than {NEGATIVE_ALPHA:.0%} of the fastest "
                    "size's time)")
        if self.median_rel_err > MEDIAN_TOLERANCE:
            return f"the median size off by {self.median_rel_err:.0%} > {MEDIAN_TOLERANCE:.0%}"
        if self.worst_bytes is not None:
            why = "its iterations' spread" if self.worst_tolerance > MIN_TOLERANCE else "the least tolerance"
            return (f"size {format_bytes(self.worst_bytes)} off by {self.worst_rel_err:.0%} > "
                    f"{self.worst_tolerance:.0%} ({why})")
        return None

    @property
    def poor(self) -> bool:
        return self.reason is not None


def fit_alpha_beta(msg_bytes: np.ndarray, time_us: np.ndarray, spread: np.ndarray | None = None) -> Fit:
    """Least squares of time = alpha + bytes / bandwidth, weighted by 1/time so that small
    (latency-bound) and large (bandwidth-bound) sizes count alike. `spread`: each size's own
    iterations' relative spread (its tolerance where above 50%)."""
    x = np.asarray(msg_bytes, dtype=float)
    y = np.asarray(time_us, dtype=float)
    w = 1.0 / y
    a = np.column_stack([np.ones_like(x), x]) * w[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(a, y * w, rcond=None)
    pred = alpha + beta * x
    ss_res = float(((y - pred) ** 2).sum())
    ss_tot = float(((y - y.mean()) ** 2).sum()) or 1.0
    bandwidth = 1.0 / (beta * 1e3) if beta > 0 else float("nan")
    rel = off_by(pred, y)
    tol = _tolerances(spread, len(x))
    excess = rel - tol
    k = int(np.argmax(excess))
    worst = (int(x[k]), float(rel[k]), float(tol[k])) if excess[k] > 0 else (None, 0.0, MIN_TOLERANCE)
    return Fit(float(alpha), bandwidth, 1.0 - ss_res / ss_tot, float(np.max(rel)), len(x), float(np.median(rel)),
               *worst, float(y.min()))


def off_by(fitted, measured) -> np.ndarray:
    """How far each fitted value is from the measured one, either way alike: the larger over the
    smaller, less one (a fit at 1.5 GB/s beside a point at 0.8 is 88% off, not 47%); a fitted time
    of zero or less is infinitely off."""
    fitted, measured = np.asarray(fitted, dtype=float), np.asarray(measured, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.maximum(fitted / measured, measured / fitted) - 1
    return np.where(fitted > 0, out, np.inf)


def _tolerances(spread, n: int) -> np.ndarray:
    """Each size's tolerance: its iterations' spread, between MIN_TOLERANCE and MAX_TOLERANCE."""
    raw = np.nan_to_num(np.asarray(spread, dtype=float)) if spread is not None else np.zeros(n)
    return np.broadcast_to(np.clip(raw, MIN_TOLERANCE, MAX_TOLERANCE), (n,))


def robust_fit(msg_bytes, time_us, spread=None) -> Fit:
    """fit_alpha_beta, and where that fit is not accepted and four sizes or more were measured, the
    fit without the one size furthest above it, where that is more than 50% above and not the
    largest size, if that fit is accepted: noise on a shared host only ever adds time (a
    scheduler's wake-up, another process), most at the small sizes, while the largest size carries
    the bandwidth. The size left out is said (`dropped_bytes`)."""
    x = np.asarray(msg_bytes, dtype=float)
    y = np.asarray(time_us, dtype=float)
    fit = fit_alpha_beta(x, y, spread)
    if not fit.poor or len(x) < 4 or not fit.bandwidth_gbps > 0:
        return fit
    pred = fit.alpha_us + x / (fit.bandwidth_gbps * 1e3)
    above = (y - pred) / pred
    k = int(np.argmax(above))
    if k == int(np.argmax(x)) or not above[k] > MIN_TOLERANCE:
        return fit  # the furthest above is the largest size, or near the line: nothing to leave out
    keep = np.arange(len(x)) != k
    refit = fit_alpha_beta(x[keep], y[keep], None if spread is None else np.asarray(spread, dtype=float)[keep])
    if refit.poor:
        return fit
    slower = y[k] / (refit.alpha_us + x[k] / (refit.bandwidth_gbps * 1e3)) - 1
    return dataclasses.replace(refit, dropped_bytes=int(x[k]), dropped_rel_err=float(slower))


def per_size(g: pd.DataFrame) -> tuple[pd.Series, pd.Series | None]:
    """Each size's time for fitting, the median over groups of each row's median iteration
    (time_us_p50: a noisy iteration moves a mean, not a median; time_us where rows lack it), and
    its iterations' spread (p99 over min, less one), where the rows have it."""
    col = "time_us_p50" if "time_us_p50" in g and g.time_us_p50.notna().all() else "time_us"
    times = g.groupby("msg_bytes", observed=True)[col].median()
    if {"time_us_p99", "time_us_min"} <= set(g) and g.time_us_min.gt(0).all():
        return times, (g.time_us_p99 / g.time_us_min - 1).groupby(g.msg_bytes, observed=True).median()
    return times, None


def fit_groups(df: pd.DataFrame):
    """(collective, topology, world_size, time per msg_bytes, fit) for every shape a sweep measured
    (a replay's ops, one iteration each at the trace's sizes, are not fitted)."""
    d = where(df, (df.status == Status.OK) & (df.pattern != "replay")) if "pattern" in df else ok_rows(df)
    for (coll, topo, n), g in d.groupby(["collective", "topology", "world_size"], observed=True):
        times, spread = per_size(g)
        yield coll, topo, int(n), times, robust_fit(times.index.values, times.values,
                                                    None if spread is None else spread.values)


def fits(df: pd.DataFrame) -> list[dict]:
    """Every shape's fit; alpha and bandwidth only where the fit is accepted, else the reason."""
    return [
        {"collective": coll, "topology": topo, "world_size": int(n), "sizes": fit.points,
         "alpha_us": None if fit.poor else fit.alpha_us, "bandwidth": None if fit.poor else fit.bandwidth_gbps,
         "r2": fit.r2, "median_rel_err": fit.median_rel_err, "max_rel_err": fit.max_rel_err,
         "quality": ("good" if not fit.poor else f"poor: {fit.reason}") + (
             f" ({format_bytes(fit.dropped_bytes)} left out, a delay: +{fit.dropped_rel_err:.0%})"
             if fit.dropped_bytes is not None else "")}
        for coll, topo, n, _, fit in fit_groups(df)
    ]
