"""What the healthy part of a fabric demonstrably delivers, read from groups under the bottleneck
rule. Pure numpy; no I/O. qualify (its probes) and the report (its node pairs) read it here.

A group runs as fast as its slowest member: its rate bounds each member from below (the member
went at least that fast) and its slowest member from above. So no healthy member is ever shown
slower than the fabric by a group it shares only with healthy members, and a fast group is
evidence that every one of its members is fast, whatever the others measured. A node's capacity
is read from its best groups; the fabric's healthy level from the fastest groups that agree with
each other. The median of all groups, the reference of a judge that trusts the majority, is the
slow level wherever most groups hold a slow member: half the nodes slow, or a node in most of the
pairs of a small cluster.

The healthy level is the highest cluster of three rates or more (in log space): from the fastest
rate down, the median of the rates within the widest healthy spread of it, until the median moves
no further (the nearest mode: a rate that noise lifted high does not carry the level with it, and
a rate or two far above all others is no level until measurements of their groups again agree
with them). The spread is the judge's limit
(judging/judge.py `limit`), first from the platform's prior alone, then pooled with the spread of
the rates above the level, which no slow member held back, and of groups measured more than once
(their differences are noise alone), read again until it settles: with
little noise the cluster is the fast groups alone, with much noise it widens to take in what noise
cannot tell apart. Below the level, a group is low under the judge's floor.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from orchestrator.judging.judge import MIN_VALUES, Prior, Source, limit
from orchestrator.judging.stats import MAD_EFFICIENCY, run_sigma

_STEPS = 64  # the level's descent ends in far fewer (each step takes in at least one more rate)
_QUANTILE_SPACING = 1.1503 - 0.3186  # a normal's 7/8 and 5/8 quantiles, in sigmas
MODE_GAP_SIGMAS = 3.0  # two parts of a set of rates this many sigmas apart are two modes (see fastest_mode) ...
MODE_SHARE = 0.45  # ... where the split explains this share of the rates' variance (benchmarks/mode_split.py)
MODE_OWN_RATES = 400  # from this many rates a split may rest on their own spread alone (see _best_split)
_PASSES = 8  # the cluster's spread read again with the window it gives (a window too narrow for the
# noise cuts the cluster's low side, so its spread reads small: each pass widens it, until it stays)


@dataclass(frozen=True)
class Level:
    """The healthy level of a set of rates and the floor below which one of them is low."""

    reference: float  # the healthy cluster's median rate
    floor: float  # a rate below floor x reference is low (the judge's limit)
    cluster: int  # rates in the healthy cluster
    rates: int  # rates it was read from
    sigma_log: float  # the spread the floor rests on (prior pooled with the cluster's)
    source: Source  # PEERS where the cluster's own spread counted, else PRIOR
    below: int = 0  # rates in slower modes apart from the level's by more than noise (fastest_mode)
    mode_floor: float = 0.0  # with such modes: the slowest rate of the level's own mode / reference (else 0)

    def low(self, rate: float) -> bool:
        return rate < self.floor * self.reference

    def high(self, rate: float) -> bool:
        """Above the level by more than noise lifts a healthy rate (as far as the floor is below):
        a level of its own that one measurement does not confirm."""
        return rate > self.reference / self.floor


def healthy_level(rates: Sequence[float] | np.ndarray, prior: Prior, m: float | None = None,
                  groups: Sequence[Hashable] | None = None) -> Level | None:
    """The level the fastest agreeing rates show, and its floor; None without a positive rate.
    `m`: values judged at once against it (default: the rates). The cluster's window is at least
    as wide as Bonferroni over the rates makes it (the fastest of many healthy rates lies that far
    above their centre); fewer than MIN_VALUES rates above every other by more than that are not a
    level (unless two of them measured one group: `groups`, which group each rate measured): the
    next cluster down is, and they stay `high` until their groups are measured again."""
    keep = [i for i, r in enumerate(rates) if r is not None and r > 0 and math.isfinite(r)]
    x = np.log(np.asarray([rates[i] for i in keep], dtype=float))
    if not len(x):
        return None
    label = _codes([groups[i] for i in keep]) if groups is not None else np.arange(len(x))
    m = max(m or len(x), 1)
    n_rates = len(x)
    repeat_sigma, repeat_df = run_sigma(x, label) if groups is not None else (None, 0.0)
    # a slower mode apart from the fastest by more than noise is no part of the healthy level: the
    # window below would take in whatever lies within the prior's widest spread of the top
    upper = fastest_mode(x, prior, (repeat_sigma, repeat_df))
    below = n_rates - int(upper.sum())
    x, label = x[upper], label[upper]
    window_m = max(m, n_rates)
    sigma, df, width = None, 0.0, limit(prior, window_m).log_drop  # first the prior's widest healthy spread
    for _ in range(_PASSES):  # then the spread above it, pooled with the prior, until it settles
        centre, top = _highest_cluster(x, label, width)
        sigma, df = _pooled(upper_spread(x, centre, width), (repeat_sigma, repeat_df))
        wider = limit(prior, window_m, sigma, df).log_drop
        if sigma is None or abs(wider - width) < 1e-3 * width:
            break
        width = wider
    # the reference is a median of the cluster: its own error widens the floor, as for peers
    inflation = math.sqrt(1 + 1.57 / len(top))
    lim = limit(prior, m, sigma, df, Source.PEERS, inflation)
    mode_floor = float(np.exp(x.min() - centre)) if below else 0.0
    return Level(float(np.exp(centre)), lim.floor, len(top), n_rates, lim.sigma_log, lim.source, below, mode_floor)


def fastest_mode(x: np.ndarray, prior: Prior, measured: tuple[float | None, float] = (None, 0.0)) -> np.ndarray:
    """Which of the log rates `x` belong to their fastest mode (a boolean mask): the rates split in
    two, the fastest k and the rest (each MIN_VALUES or more), where the two parts stand apart by
    more than noise (`_best_split`), then the fastest part split again, until it holds one mode.
    Calibrated by benchmarks/mode_split.py: with noise within the prior a set of one mode is split in
    none of 300-1,000 draws of 6-2,016 normal rates and in at most 0.7% with Student-t(3) tails; two
    modes 5 sigmas apart are separated in 59-77% of draws of 6-12 rates and 94-100% from 48. With
    noise 2.7x the prior's, one mode is split in 5-10% of 6-28 rates, 2% of 120, none of 496."""
    keep = np.ones(len(x), dtype=bool)
    order = np.argsort(-x, kind="stable")
    end = len(x)  # the fastest `end` rates (of `order`) are still one candidate mode
    while end >= 2 * MIN_VALUES:
        k = _best_split(x[order[:end]], prior, measured)
        if k is None:
            break
        keep[order[k:end]] = False
        end = k
    # a spread read from few rates, wider than the prior, is too uncertain for a split chosen as the
    # widest of many (a third of 10-28 normal rates of 4.5x the prior's spread split so): below
    # MODE_OWN_RATES rates the mode kept must spread no wider than the prior (with `measured`) says
    known_ss, known_df = _known(prior, measured)
    if end < len(x) and len(x) < MODE_OWN_RATES and np.std(x[keep], ddof=1) > math.sqrt(known_ss / known_df):
        return np.ones(len(x), dtype=bool)
    return keep


def _known(prior: Prior, measured: tuple[float | None, float]) -> tuple[float, float]:
    """(Sum of squares, degrees of freedom) of the spread known before the split: the prior's, with
    that of groups measured more than once where there is one."""
    sigma, df = measured
    if sigma is None or df <= 0:
        return prior.df * prior.sigma_log ** 2, prior.df
    return prior.df * prior.sigma_log ** 2 + df * sigma ** 2, prior.df + df


def _best_split(desc: np.ndarray, prior: Prior, measured: tuple[float | None, float]) -> int | None:
    """The k where the fastest k of `desc` (log rates, fastest first) stand apart from the rest: the
    gap between the two parts' means MODE_GAP_SIGMAS or more of the wider part's spread (each part's
    read from its rates, or its rates pooled with the prior and `measured` where that is wider: a
    spread read from three rates is not trusted to be small), and the split explaining MODE_SHARE or
    more of the rates' variance (heavy-tailed noise puts a few rates far out: apart, but explaining
    little); the widest such gap, or None."""
    n = len(desc)
    k = np.arange(MIN_VALUES, n - MIN_VALUES + 1)
    s1, s2 = np.cumsum(desc), np.cumsum(desc * desc)
    mean_u, mean_l = s1[k - 1] / k, (s1[-1] - s1[k - 1]) / (n - k)
    ss_u = np.maximum(s2[k - 1] - k * mean_u ** 2, 0.0)
    ss_l = np.maximum((s2[-1] - s2[k - 1]) - (n - k) * mean_l ** 2, 0.0)
    known_ss, known_df = _known(prior, measured)
    own_u, own_l = np.sqrt(ss_u / (k - 1)), np.sqrt(ss_l / (n - k - 1))
    known_u = np.sqrt((ss_u + known_ss) / (k - 1 + known_df))
    known_l = np.sqrt((ss_l + known_ss) / (n - k - 1 + known_df))
    gap = (mean_u - mean_l) / np.maximum(np.maximum(own_u, known_u), np.maximum(own_l, known_l))
    total = s2[-1] - s1[-1] ** 2 / n
    explained = 1 - (ss_u + ss_l) / total if total > 0 else np.zeros(len(k))
    gap = np.where(explained >= MODE_SHARE, gap, 0.0)
    best = int(np.argmax(gap))
    return int(k[best]) if gap[best] >= MODE_GAP_SIGMAS else None


def upper_spread(x: np.ndarray, centre: float, width: float) -> tuple[float | None, float]:
    """(Sigma, degrees of freedom) of healthy rates about their level, read from the upper part of
    its cluster (every rate within `width` below `centre`, and all above): the spacing of its 5/8
    and 7/8 quantiles, 0.831 sigma of a normal. No slow member holds a rate of the upper part back
    (a group is as fast as its slowest), so a slow part at the cluster's bottom (up to a third)
    barely widens it, as it widens a spread about the centre, which it pulls down. None with fewer
    than MIN_VALUES rates."""
    cluster = x[x >= centre - width]
    if len(cluster) < MIN_VALUES:
        return None, 0.0
    q5, q7 = np.quantile(cluster, [5 / 8, 7 / 8])
    return float((q7 - q5) / _QUANTILE_SPACING), MAD_EFFICIENCY * len(cluster) / 2


def _pooled(*estimates: tuple[float | None, float]) -> tuple[float | None, float]:
    """Sigma estimates with their degrees of freedom, pooled (None where none has any)."""
    known = [(sigma, df) for sigma, df in estimates if sigma is not None and df > 0]
    if not known:
        return None, 0.0
    df = sum(d for _, d in known)
    return math.sqrt(sum(d * s * s for s, d in known) / df), df


def _highest_cluster(x: np.ndarray, label: np.ndarray, width: float) -> tuple[float, np.ndarray]:
    """(Centre, members) of the highest cluster of MIN_VALUES rates or more, or of two rates of one
    group (measured again, it agreed): from each rate down, the median of the rates within `width`
    of it, until it stays; fewer rates there are passed over (two outliers of a noisy host, or one
    fast group not yet measured again). With no such cluster, every rate is one."""
    order = np.argsort(-x, kind="stable")
    ordered, labels = x[order], label[order]
    for i in range(len(ordered)):
        below, below_labels = ordered[i:], labels[i:]
        centre = _descend(below, ordered[i], width)
        near = np.abs(below - centre) <= width
        members = below[near]
        if len(members) >= MIN_VALUES or len(np.unique(below_labels[near])) < len(members):
            return centre, members
    return float(np.median(x)), x


def _codes(values: Sequence[Hashable]) -> np.ndarray:
    """Each value's index among the distinct values, in first-seen order."""
    seen: dict[Hashable, int] = {}
    return np.asarray([seen.setdefault(v, len(seen)) for v in values], dtype=int)


def _descend(x: np.ndarray, centre: float, width: float) -> float:
    """From `centre` down: the median of the rates within `width` of it, until it stays (the
    nearest mode below: a window cut on one side only would stop above the mode of a noisy set)."""
    for _ in range(_STEPS):
        near = float(np.median(x[np.abs(x - centre) <= width]))
        if near >= centre - 1e-12:
            return centre
        centre = near
    return centre


def best_by_member(groups: Sequence[Sequence[Hashable]], rates: Sequence[float]) -> dict[Hashable, float]:
    """Each member's best rate over the groups it is in (a lower bound of what it can do)."""
    best: dict[Hashable, float] = {}
    for members, rate in zip(groups, rates):
        if rate is None or not rate > 0:
            continue
        for member in members:
            if rate > best.get(member, 0.0):
                best[member] = rate
    return best
