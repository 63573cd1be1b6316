"""How much a link's time may move from one run to the next without anything having changed,
estimated from what the data holds. Pure numpy; no I/O.

Three estimates, best first (README: Comparisons):
- runs: several baseline runs of the same sweep. Each link's mean log time in each run, less the
  mean of its other runs (leave-one-out), scaled to one run's spread and pooled over the links of
  a shape: sigma = 1.4826 * median |residual| (robust: one odd link or run does not widen it).
- peers: one run on each side. The log changes d of the matched links of one shape spread as
  wide as the runs vary; sigma is the smaller of two robust spreads, 1.4826 * the median of
  |d - median d| (a shift of every link, a regression everywhere, does not widen it) and 1.4826 *
  the lower median of |d| (a slow node in half of a small cluster's links does not widen it).
- iterations: the row's own per-iteration times (standard error of the change of mean log
  time), which cannot see the variation between runs: it sets the limit wherever it is the larger
  of the two, never alone. A row with neither run-to-run estimate (a shape of fewer than
  MIN_PEERS links and one baseline run) is `unjudged`: nothing it holds says how far a healthy
  link moves between runs, and its iterations alone flagged noise as drops (a -24% move of a
  3-node cluster's intra link, issue 21).
An estimate from a few values is itself noisy, so its quantile is Student's t, not the normal
one, with the degrees of freedom a median of absolute deviations is worth: 37% of its values (its
asymptotic efficiency). Calibrated on normal samples of 4 to 256 links, this keeps the chance that
a comparison of two healthy runs flags any link at 2-5% (benchmarks/compare_errors.py).
"""

from __future__ import annotations

import enum
import math
from statistics import NormalDist

import numpy as np

FAMILY_ALPHA = 0.05  # chance that comparing a run with a repeat of itself flags anything
MAD_SCALE = 1.4826  # median |x| of a normal sample is 0.6745 sigma
MIN_PEERS = 4  # links of one shape needed to read the run-to-run spread from their changes
MIN_RUN_DF = 3  # independent residuals needed to read it from several baseline runs
MAD_EFFICIENCY = 0.37  # a MAD of n normal values is as precise as a standard deviation of 0.37 n


class NoiseSource(enum.Enum):
    RUNS = "runs"
    PEERS = "peers"
    ITERATIONS = "iterations"
    UNJUDGED = "unjudged"


def peer_sigma(d: np.ndarray) -> tuple[float | None, float]:
    """(Run-to-run sigma of one shape's log changes `d`, one per matched link, or None when there
    are fewer than MIN_PEERS links; its degrees of freedom)."""
    d = np.asarray(d, dtype=float)
    if len(d) < MIN_PEERS:
        return None, 0.0
    about_median = np.median(np.abs(d - np.median(d)))
    about_zero = np.sort(np.abs(d))[(len(d) - 1) // 2]  # the lower median
    return float(MAD_SCALE * min(about_median, about_zero)), MAD_EFFICIENCY * len(d)


def run_sigma(means: np.ndarray, owner: np.ndarray) -> tuple[float | None, float]:
    """(Sigma of one run's mean log time about its link's level, degrees of freedom) from
    `means[i]`, the mean log time of link `owner[i]` in one baseline run; (None, df) when fewer than
    MIN_RUN_DF independent residuals (links x (runs - 1)) exist."""
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
    return float(MAD_SCALE * np.median(np.abs(residual))), MAD_EFFICIENCY * df


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
        lo, hi = (mid, hi) if _t_upper(mid, df) > 1 - p else (lo, mid)
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
