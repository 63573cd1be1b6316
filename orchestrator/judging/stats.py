"""The statistics under the judge (judging/judge.py): the run-to-run spread read from several
baseline runs, Student's t quantiles, and the constants of robust estimates. Pure numpy; no I/O.

- runs: several baseline runs of the same sweep. Each link's mean log time in each run, less the
  mean of its other runs (leave-one-out), scaled to one run's spread and pooled over the links of
  a shape: sigma = 1.4826 * median |residual| (robust: one odd link or run does not widen it).
An estimate from a few values is itself noisy, so its quantile is Student's t, not the normal
one, with the degrees of freedom a median of absolute deviations is worth: 37% of its values (its
asymptotic efficiency); the judge pools it with a prior for the platform.
"""

from __future__ import annotations

import functools
import math
from statistics import NormalDist

import numpy as np

FAMILY_ALPHA = 0.05  # chance that comparing a run with a repeat of itself flags anything
MAD_SCALE = 1.4826  # median |x| of a normal sample is 0.6745 sigma
MIN_RUN_DF = 3  # independent residuals needed to read it from several baseline runs
MAD_EFFICIENCY = 0.37  # a MAD of n normal values is as precise as a standard deviation of 0.37 n


def run_sigma(means: np.ndarray, owner: np.ndarray, scale: np.ndarray | None = None) -> tuple[float | None, float]:
    """(Sigma of one run's mean log time about its link's level, degrees of freedom) from
    `means[i]`, the mean log time of link `owner[i]` in one baseline run, each residual divided by
    `scale[i]` where given (a contended measurement's wider spread: judging.contention); (None, df)
    when fewer than MIN_RUN_DF independent residuals (links x (runs - 1)) exist."""
    means, owner = np.asarray(means, dtype=float), np.asarray(owner)
    _, inverse, k = np.unique(owner, return_inverse=True, return_counts=True)
    k_row = k[inverse]
    several = k_row >= 2
    df = int((k[k >= 2] - 1).sum())
    if df < MIN_RUN_DF:
        return None, float(df)
    sums = np.bincount(inverse, weights=means)
    others = (sums[inverse] - means)[several] / (k_row[several] - 1)
    # x - mean(others) has variance sigma^2 * k / (k - 1): scale each residual back to sigma
    residual = (means[several] - others) * np.sqrt((k_row[several] - 1) / k_row[several])
    if scale is not None:
        residual = residual / np.asarray(scale, dtype=float)[several]
    return float(MAD_SCALE * np.median(np.abs(residual))), MAD_EFFICIENCY * df


@functools.lru_cache(maxsize=4096)  # the verdicts ask the same few (p, df) thousands of times a run
def quantile(p: float, df: float | None) -> float:
    """The p-quantile of Student's t with `df` degrees of freedom (normal when df is None)."""
    z = NormalDist().inv_cdf(p)
    if df is None or df > 1e6:
        return z
    lo, hi = z, z
    while _t_upper(hi, df) > 1 - p:
        hi *= 2
    for _ in range(80):  # bisection: the tail is monotone in t
        mid = (lo + hi) / 2
        step = (mid, hi) if _t_upper(mid, df) > 1 - p else (lo, mid)
        if step == (lo, hi):  # a fixed point in floating point: the remaining steps change nothing
            break
        lo, hi = step
    return (lo + hi) / 2


def _t_upper(t: float, df: float) -> float:
    """P(T > t) for t >= 0: half the regularised incomplete beta I_x(df/2, 1/2), x = df/(df+t^2)."""
    return 0.5 * _beta_inc(df / 2, 0.5, df / (df + t * t))


def _beta_inc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b) by its continued fraction (Numerical Recipes 6.4)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _beta_inc(b, a, 1.0 - x)
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
    f = d
    for m in range(1, 300):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
            c = 1.0 + num / c
            c = c if abs(c) > 1e-300 else 1e-300
            f *= c * d
        if abs(c * d - 1.0) < 1e-14:
            break
    return front * f / a


def binomial_tail(k: int, m: int, q: float) -> float:
    """P(at least k of m) where each is with chance q: how often noise alone makes k of a member's
    m pairs or probes read slow (the intermittent and uplink rules). Past a thousand trials (attach's
    records) the terms are summed in logarithms: math.comb's integers no longer fit a float."""
    if m <= 1000:
        return float(sum(math.comb(m, j) * q**j * (1 - q) ** (m - j) for j in range(k, m + 1)))
    if q <= 0 or q >= 1:
        return float(k <= 0) if q <= 0 else 1.0
    logs = [math.lgamma(m + 1) - math.lgamma(j + 1) - math.lgamma(m - j + 1) + j * math.log(q)
            + (m - j) * math.log1p(-q) for j in range(max(k, 0), m + 1)]
    top = max(logs, default=-math.inf)
    return 0.0 if top == -math.inf else min(1.0, math.exp(top) * sum(math.exp(v - top) for v in logs))
