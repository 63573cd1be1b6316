"""The one judge of "slower than it should be": is a value low against its reference (its peers in
a run, its own past runs, an expected value)? Pure numpy; no I/O. qualify's probes and gates, the
report's peer flags, compare and watch's drift (through compare) read every such verdict here:
`limit` (the noise a reference allows, from its values, a prior and the family's size) and
`allowed_drop` (that noise against the caller's threshold, scale and cap), each with its own knobs.

Everything is in log space (a 2x drop is as far below as a 2x rise is above). The judged value
never widens its own reference: its peers' median and spread are read from the others (leave one
out). How far a healthy value may fall below its reference is estimated from the data where there
is some and from a stated prior for the platform where there is little: the prior's sigma counts
as `df` degrees of freedom of evidence, the data's robust spread as MAD_EFFICIENCY x its count,
pooled (a normal-inverse-chi-square update), and the limit is Student's t at the pooled degrees
of freedom, Bonferroni over the values judged at once (FAMILY_ALPHA). So 4 links flag a 10x drop
and not a 30% wobble, and 256 links read their own noise. A drop of GROSS_DROP or more is never
passed as noise where three values or more were measured and the spread makes it safe (GROSS_DROP
at least GROSS_SIGMAS normal sigmas out under the regime's own tails: this shared host's
bandwidth-bound links, -34% to +93%, qualify; its latency-bound sizes, which move 7-30x, do not).
With the prior alone (no data) only a drop beyond any plausible noise of the platform and regime
is one: its tails at 1 - PLAUSIBLE_ALPHA / m. A contended measurement's spread is wider by a
measured factor (`widen`, judging/contention.py).

Each regime has its priors (judging/regime.py: latency-bound sizes, whose time is a call's fixed
cost, move far more between runs than bandwidth-bound ones); LATENCY_PRIORS says where each comes from.
Bandwidth priors (sigma of a healthy value's log about its reference, between runs or between peers):
- gloo, inside a node (CPU memory copies on a shared host): 0.30. Measured: the same intra-node
  sweep run twice a minute apart moved healthy links -34% to +93% (docs/PERFORMANCE.md, issue
  21); benchmarks/compare_errors.py's host profile (Student-t(3) run effect of scale 0.2) has a
  robust sigma of 0.23 per run, 0.32 for a change between two.
- gloo across nodes (a network link): 0.10; the lab's tc-shaped links vary 5.6% (docs/PERFORMANCE.md,
  section 8), a real Ethernet link under other traffic more.
- nccl (GPU fabrics): 0.04; NCCL busbw on H100-class nodes repeats within 1-3% run to run
  (issue 21's figure): a change between two runs at 3% each is 4.2%.
Each prior counts as PRIOR_DF degrees of freedom.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from orchestrator.judging.regime import Regime
from orchestrator.judging.stats import FAMILY_ALPHA, MAD_EFFICIENCY, MAD_SCALE, quantile

GROSS_DROP = 3.0  # a value this many times below its reference is never noise (3 or more values measured) ...
GROSS_SIGMAS = 3.0  # ... where GROSS_DROP is at least this many sigmas of the spread it is judged with
PLAUSIBLE_ALPHA = 1e-4  # a prior alone flags only a drop its noise explains once in 10,000 unchanged compares
MIN_VALUES = 3  # values of one shape needed to judge one against the others (a median of one is not a reference)
EXACT_LEAVE_ONE_OUT = 32  # above this many values, leaving one out moves a robust spread by little: one spread for all


@dataclass(frozen=True)
class Prior:
    """What a healthy value's spread about its reference is, before any data: sigma of its log, and
    how many degrees of freedom of evidence that is worth against the data's."""

    platform: str
    sigma_log: float
    df: float
    source: str
    tail_df: float | None = None  # the Student-t shape of a healthy value's moves where heavier than its
    # estimate's (None: the pooled degrees of freedom set the quantile)


PRIOR_DF = 8.0  # each prior rests on many measured runs: worth the spread of 8 / 0.37 ~ 22 links' changes
PRIORS = {
    # heavy-tailed (3 degrees of freedom, as the host profile's Student-t(3) run effects): a healthy
    # intra-node CPU link moves 2x now and then
    ("gloo", False): Prior("cpu-intra", 0.30, 3.0, "shared CPU host, intra-node: -34%..+93% run to run"),
    ("gloo", True): Prior("cpu-network", 0.10, PRIOR_DF, "network link: the lab's shaped links vary 5.6%"),
    ("nccl", False): Prior("gpu", 0.04, PRIOR_DF, "GPU fabrics: 1-3% run to run"),
    ("nccl", True): Prior("gpu", 0.04, PRIOR_DF, "GPU fabrics: 1-3% run to run"),
}


# latency-bound sizes (judging/regime.py): the fixed cost of a call, set by the host's scheduler on
# CPUs and by launch and proxy-thread latency on GPUs, moves far more between runs than bytes do
LATENCY_PRIORS = {
    # measured: 29 default sweeps of this 2-core host beside a busy loop and another engineer's tests
    # (benchmarks/compare_false_alarms.py; docs/PERFORMANCE.md section 7). Their changes, each scaled
    # to a quiet host (judging.contention), spread 1.15x (8 runs) and 1.42x (21 runs) wider at
    # 16 B-64 KiB than at 256 KiB-16 MiB, and reach 3.8-4.6 sigmas in 3 of 7 pairs of 65 sizes:
    # Student-t(6) tails. The bandwidth prior measured on this host quiet (0.30) times ~1.33: 0.40,
    # worth 3 df (an extrapolation).
    ("gloo", False): Prior("cpu-intra-latency", 0.40, 3.0, "this shared host's latency-bound sizes: the "
                           "quiet host's 0.30 x their 1.15-1.42x wider spread, t(6) tails", tail_df=6.0),
    # not measured apart: a lab's namespaces share this host's scheduler, which sets a call's latency
    ("gloo", True): Prior("cpu-network-latency", 0.40, 3.0, "as inside a node (the same host's "
                          "scheduler sets it)", tail_df=6.0),
    # not measured here (one GPU): issue 42's "by tens of percent on GPU fleets"
    ("nccl", False): Prior("gpu-latency", 0.20, PRIOR_DF, "GPU fleets' small sizes: tens of percent run to run"),
    ("nccl", True): Prior("gpu-latency", 0.20, PRIOR_DF, "GPU fleets' small sizes: tens of percent run to run"),
}


def prior_for(backend: str | None, across_nodes: bool, regime: Regime = Regime.BANDWIDTH) -> Prior:
    """The prior of a backend ("gloo", "nccl"; anything else: the widest) inside a node or across,
    for sizes of `regime` (the platform figures above are bandwidth-bound sizes')."""
    table = LATENCY_PRIORS if regime is Regime.LATENCY else PRIORS
    return table.get((backend or "gloo", bool(across_nodes)), table[("gloo", False)])


class Source(enum.Enum):
    """Where the spread a value was judged against came from."""

    RUNS = "runs"  # several baseline runs of the same sweep
    PEERS = "peers"  # the other values of its shape, with the prior
    PRIOR = "prior"  # the prior alone (too few values to read a spread from)
    UNJUDGED = "unjudged"


@dataclass(frozen=True)
class Limit:
    """How far (log) a healthy value may fall below its reference, and what that rests on."""

    log_drop: float
    sigma_log: float
    df: float
    source: Source

    @property
    def floor(self) -> float:
        """The fraction of its reference below which a value is low (1 / the allowed drop)."""
        return math.exp(-self.log_drop)


def robust_sigma(deviations: np.ndarray) -> float | None:
    """A robust sigma of deviations already centred on their reference: the smaller of the MAD
    about their median and the lower median of their absolute values, x 1.4826 (a shift of all
    of them, or a slow half of a small set, does not widen it). None for no values."""
    d = np.asarray(deviations, dtype=float)
    d = d[np.isfinite(d)]
    if not len(d):
        return None
    about_median = np.median(np.abs(d - np.median(d)))
    lower = (len(d) - 1) // 2
    about_zero = np.partition(np.abs(d), lower)[lower]
    return float(MAD_SCALE * min(about_median, about_zero))


def limit(prior: Prior, m: int, sigma_data: float | None = None, df_data: float = 0.0,
          source: Source = Source.PEERS, inflation: float = 1.0, gross: bool = True, widen: float = 1.0) -> Limit:
    """The allowed log drop: the prior pooled with the data's sigma (df_data degrees of freedom),
    times `widen` (a contended measurement's wider spread, judging.contention), Student's t at
    1 - FAMILY_ALPHA / m (with the prior alone, the prior's own tails at 1 - PLAUSIBLE_ALPHA / m:
    without data only a drop beyond any plausible noise of that platform and regime is one), times
    `inflation` (the reference's own uncertainty), capped at
    log(GROSS_DROP) where `gross` (three values or more) and the regime's measured spread (the prior's,
    widened as contended) makes a GROSS_DROP at least GROSS_SIGMAS sigmas (never for sizes that move
    by factors, as latency-bound ones on a shared host; noisy peers do not lift it)."""
    if sigma_data is None or df_data <= 0:
        sigma_data, df_data, source = 0.0, 0.0, Source.PRIOR
    df = prior.df + df_data
    sigma = widen * math.sqrt((prior.df * prior.sigma_log ** 2 + df_data * sigma_data ** 2) / df)
    if source is Source.PRIOR:  # the platform's spread as measured, its tails as measured (normal: None)
        log_drop = quantile(1 - PLAUSIBLE_ALPHA / max(m, 1), prior.tail_df) * sigma * inflation
    else:  # a spread read from few values: Student's t at the evidence's degrees of freedom
        shape = df if prior.tail_df is None else min(df, prior.tail_df)
        log_drop = quantile(1 - FAMILY_ALPHA / max(m, 1), shape) * sigma * inflation
    if gross and gross_applies(prior.sigma_log * widen, prior.tail_df):
        log_drop = min(log_drop, math.log(GROSS_DROP))
    return Limit(log_drop, sigma, df, source)


def allowed_drop(floor, threshold: float, scale: float = 1.0, cap: float | None = None):
    """The one rule every caller applies to the judge's floor (a value or an array): a value is slow
    when it falls below its reference by more than this fraction, the larger of the caller's
    `threshold` (the least drop worth naming) and the noise the floor allows (1 - floor), times
    `scale`, at most `cap`. The callers differ only in their knobs: qualify's pair probes and the
    report's peers (threshold), qualify's gates (twice, capped: a group of every node is noisier),
    compare and watch (compare's threshold, the floor from runs or iterations)."""
    drop = scale * np.maximum(1 - np.asarray(floor, dtype=float), threshold)
    drop = drop if cap is None else np.minimum(drop, cap)
    return float(drop) if np.ndim(drop) == 0 else drop


def gross_applies(sigma_log: float, tail_df: float | None = None) -> bool:
    """Whether a GROSS_DROP is never noise for values of this spread (log sigma) and tails (Student-t
    degrees of freedom; None: normal): it lies at least as far out as GROSS_SIGMAS sigmas of a normal
    value, in tail probability. The host's bandwidth-bound links (0.30) qualify; its latency-bound
    sizes (0.40 with t(6) tails on a quiet host, 7-30x moves on a busy one) do not."""
    far = quantile(NormalDist().cdf(GROSS_SIGMAS), tail_df)
    return far * sigma_log <= math.log(GROSS_DROP)


@dataclass(frozen=True)
class PeerArrays:
    """Each value of one shape against the others, as arrays (the report judges a million rows)."""

    reference: np.ndarray  # the others' median, in the values' units
    ratio: np.ndarray  # value / reference
    floor: np.ndarray  # below this ratio a value is low (0 where unjudged)
    judged: bool  # False below MIN_VALUES values

    @property
    def low(self) -> np.ndarray:
        return self.ratio < self.floor


def peer_arrays(values: np.ndarray, prior: Prior, m: int | None = None) -> PeerArrays:
    """Each of `values` (a rate: higher is better) against the median of the others, the others'
    log spread about it pooled with `prior`. Fewer than MIN_VALUES values: unjudged (which of two is
    off cannot be said). `m`: values judged at once (default len(values)). Above
    EXACT_LEAVE_ONE_OUT values the spread is read once from all of them (one value moves a robust
    spread of many by little); the medians are always the others' own (vectorised)."""
    v = np.log(np.maximum(np.asarray(values, dtype=float), 1e-300))
    n = len(v)
    m = n if m is None else m
    if n < MIN_VALUES:
        centres = np.array([np.median(np.delete(v, i)) if n > 1 else np.nan for i in range(n)])
        return PeerArrays(np.exp(centres), np.exp(v - centres), np.zeros(n), False)
    centres = leave_one_out_medians(v)
    # the reference is a median of n-1 values: its own error adds ~1.25^2 / (n-1) of a variance
    inflation = math.sqrt(1 + 1.57 / (n - 1))
    if n > EXACT_LEAVE_ONE_OUT:
        shared = limit(prior, m, robust_sigma(v - np.median(v)), MAD_EFFICIENCY * (n - 1), Source.PEERS, inflation)
        floors = np.full(n, shared.floor)
    else:
        floors = np.array([limit(prior, m, robust_sigma(np.delete(v, i) - centres[i]), MAD_EFFICIENCY * (n - 1),
                                 Source.PEERS, inflation).floor for i in range(n)])
    return PeerArrays(np.exp(centres), np.exp(v - centres), floors, True)


def leave_one_out_medians(v: np.ndarray) -> np.ndarray:
    """For each i, the median of v without v[i], in O(n): the others' k-th smallest is the k-th
    smallest of all where v[i] lies above it, else the (k+1)-th (where v[i] equals the k-th, so
    does the (k+1)-th or v[i] is among the k+1 smallest); a partition finds the two."""
    v = np.asarray(v, dtype=float)
    n = len(v)
    middle = sorted({k for k in ((n - 1) // 2 - 1, (n - 1) // 2, (n - 1) // 2 + 1) if 0 <= k < n})
    s = np.full(n + 1, np.nan)
    if middle:
        s[middle] = np.partition(v, middle)[middle]

    def kth_of_others(k: int) -> np.ndarray:  # the k-th smallest of the others (0-based)
        return np.where(v > s[k], s[k], s[min(k + 1, n - 1)])

    if (n - 1) % 2:
        return kth_of_others((n - 1) // 2)
    return (kth_of_others((n - 1) // 2 - 1) + kth_of_others((n - 1) // 2)) / 2


def grouped_leave_one_out_medians(groups: np.ndarray, v: np.ndarray) -> np.ndarray:
    """leave_one_out_medians within each group (`groups`: a label per value), all groups at once:
    each value's reference is the median of the other members of its own group (NaN alone). Groups
    of one size are sorted together as the rows of one matrix (a million groups of 2 in a blink)."""
    groups, v = np.asarray(groups), np.asarray(v, dtype=float)
    if not len(v):
        return np.array([], dtype=float)
    if np.any(groups[1:] < groups[:-1]):  # not in group order: put it so, and back
        order = np.argsort(groups, kind="stable")
        out = np.empty(len(v))
        out[order] = grouped_leave_one_out_medians(groups[order], v[order])
        return out
    starts = np.r_[0, np.flatnonzero(groups[1:] != groups[:-1]) + 1]
    sizes = np.diff(np.r_[starts, len(v)])
    out = np.full(len(v), np.nan)
    for k in np.unique(sizes):
        if k == 1:
            continue
        idx = starts[sizes == k][:, None] + np.arange(k)
        out[idx] = _leave_one_out_rows(v[idx])
    return out


def _leave_one_out_rows(m: np.ndarray) -> np.ndarray:
    """leave_one_out_medians of every row of a matrix (rows of k >= 2 values)."""
    k = m.shape[1]
    if k == 2:  # the other one
        return m[:, ::-1]
    order = np.argsort(m, axis=1, kind="stable")
    s = np.take_along_axis(m, order, axis=1)
    position = np.empty_like(order)
    np.put_along_axis(position, order, np.arange(k)[None, :].repeat(len(m), 0), axis=1)

    def kth_of_others(j: int) -> np.ndarray:  # the j-th smallest of the others (0-based), per element
        return np.where(position > j, s[:, [j]], s[:, [min(j + 1, k - 1)]])

    others = k - 1
    if others % 2:
        return kth_of_others(others // 2)
    return (kth_of_others(others // 2 - 1) + kth_of_others(others // 2)) / 2
