"""Two runs (or several baseline runs and one new run) row by row: busbw and time changes of
matched rows, the noise each change has to beat and where that noise was read, rows found on one
side only, and what the comparison concludes. Pure; no Ray, no I/O.

Rows match by shape (collective, dtype, op, placement, msg_bytes, topology, world size, ranks per
node, pattern) and, by default, by link: the group's devices (node IP and local rank of every
rank, in rank order), so a pair that lost 40% among many is compared with itself, not hidden in a
median. `by="shape"` pools every group of a shape instead (two different clusters).

The change of a matched key is measured on log times: d = mean(log t_new) - mean(log t_base)
over the iterations of its rows (all baseline runs together; a row without them, imported from
nccl-tests without -I, counts its mean time as one). What is printed is what is judged: busbw and
time are the geometric means of the iterations (busbw_new / busbw_base = exp(-d)), busbw_change
= exp(-d) - 1, and noise_floor = 1 - exp(-limit) is the busbw change noise alone can explain; a
drop is flagged exactly where busbw_change < -max(threshold, noise_floor).

Each key is judged in its regime (judging/regime.py: latency-bound sizes move by factors between
runs on a shared host, bandwidth-bound ones far less) by the one judge (judging/judge.py), against
its family: the matched keys of its backend, topology and regime. How far a healthy key moves
between runs is read from several baseline runs of the family where they exist (`runs`), else from
the other keys' changes, the judged one left out (`peers`), each pooled with the prior of that
platform and regime, or from the prior alone where the family has one or two keys (`prior`: only a
drop beyond any plausible noise is flagged, and the comparison is inconclusive); each key's spread
is widened by how contended its hosts were while it was measured, relative to its family, and the
prior by the family's contention where the CPU bounds the time (judging/contention.py; where
contention leaves a 3x drop of a bandwidth-bound size inside the noise, the comparison is
inconclusive); Student's
t at 1 - 0.05/m (m matched keys, Bonferroni), capped at a 3x drop where the family's spread makes
3x at least 3 sigmas. A drop is flagged when busbw fell by more than `threshold` AND d exceeds that
limit and the row's own iteration noise (z * se, se = sqrt(var_base / n_base + var_new / n_new);
`iterations` where it is the larger).
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from orchestrator.judging.contention import (
    CONTENDED,
    RunLoad,
    cpu_bound,
    oversubscription,
    run_load,
    spread_factor,
    widening,
)
from orchestrator.judging.judge import (
    EXACT_LEAVE_ONE_OUT,
    GROSS_DROP,
    Source,
    allowed_drop,
    limit,
    prior_for,
    robust_sigma,
)
from orchestrator.judging.regime import Regime, regimes
from orchestrator.judging.stats import FAMILY_ALPHA, MAD_EFFICIENCY, quantile, run_sigma
from workloads.messages import Status

SHAPE_KEY = ["collective", "dtype", "op", "in_place", "msg_bytes", "topology", "world_size", "ranks_per_node",
             "pattern"]
CURVE_KEY = [c for c in SHAPE_KEY if c != "msg_bytes"]  # a shape at every size: the regime rule's curve
CONTENTION = ["cpu_busy_frac", "cpu_wait_frac", "load_per_cpu", "steal_frac"]
COLUMNS = [*SHAPE_KEY, "status", "busbw_gbps", "time_us", "iter_time_us", "node_ips", "local_ranks", "run_id",
           "backend", *CONTENTION]


def _links(table: pa.Table) -> np.ndarray:
    """Each row's Link (analysis/link.py) as text, "ip:local,ip:local,..." in rank order."""
    ips = table.column("node_ips").combine_chunks()
    locals_ = table.column("local_ranks").combine_chunks()
    if locals_.null_count == len(locals_):  # written before local_ranks existed: nodes only
        return pc.binary_join(ips, ",").to_numpy(zero_copy_only=False)
    pairs = pc.binary_join_element_wise(ips.values, pc.cast(locals_.values, pa.string()), ":")
    joined = pa.ListArray.from_arrays(ips.offsets, pairs)
    return pc.binary_join(joined, ",").to_numpy(zero_copy_only=False)


def _column(table: pa.Table, name: str) -> np.ndarray:
    """A float column as numpy, NaN for nulls and for a column the table lacks (rows written before it)."""
    if name not in table.column_names:
        return np.full(table.num_rows, np.nan)
    return pc.cast(table.column(name), pa.float64()).to_numpy(zero_copy_only=False)


def _rows(table: pa.Table, by: str) -> pd.DataFrame:
    """The ok rows: shape, link, key, curve, run, busbw, time, oversubscription, iterations' log sums."""
    ok = table.filter(pc.equal(table.column("status"), Status.OK.value))
    extra = ["backend"] if "backend" in ok.column_names else []
    df = ok.select(SHAPE_KEY + ["busbw_gbps", "time_us", "run_id", *extra]).to_pandas()
    if not extra:
        df["backend"] = None
    link = pa.array(_links(ok), pa.string()) if by == "link" else pa.array([""] * ok.num_rows, pa.string())

    def joined(columns: list[str]) -> pa.Array:
        return pc.binary_join_element_wise(*(pc.cast(ok.column(c), pa.string()) for c in columns), link, "|")

    df["link"] = link.to_numpy(zero_copy_only=False)
    df["key"] = joined(SHAPE_KEY).to_numpy(zero_copy_only=False)
    df["curve"] = joined(CURVE_KEY).to_numpy(zero_copy_only=False)
    df["oversub"] = oversubscription(_column(ok, "cpu_busy_frac"), _column(ok, "cpu_wait_frac"))
    times = ok.column("iter_time_us").combine_chunks()
    lengths = np.diff(times.offsets.to_numpy()) if len(times) else np.zeros(0, dtype=int)
    logs = np.log(np.maximum(times.values.to_numpy(zero_copy_only=False), 1e-9))
    owner = np.repeat(np.arange(len(df)), lengths)
    s1 = np.bincount(owner, weights=logs, minlength=len(df))
    s2 = np.bincount(owner, weights=logs * logs, minlength=len(df))
    # a row without its iterations (imported from nccl-tests without -I) counts its mean time as one
    mean = df.time_us.to_numpy(dtype=float)
    alone = (lengths == 0) & (np.nan_to_num(mean) > 0)
    log_mean = np.log(np.where(alone, mean, 1.0))
    df["n"] = np.where(alone, 1, lengths)
    df["s1"] = np.where(alone, log_mean, s1)
    df["s2"] = np.where(alone, log_mean * log_mean, s2)
    df["bytes_factor"] = df.busbw_gbps * df.time_us  # busbw x time: the key's bytes x factor / 1e3
    return df


def _side(df: pd.DataFrame) -> pd.DataFrame:
    """Per key: its shape, link and curve, iterations n, mean and variance of log(time), the
    geometric mean busbw and time, and its rows' median oversubscription."""
    g = df.groupby("key", sort=False)
    out = df.drop_duplicates("key").set_index("key")[SHAPE_KEY + ["link", "curve", "backend"]]
    out = out.join(g[["bytes_factor", "oversub"]].median()).join(g[["n", "s1", "s2"]].sum())
    out["runs"] = g.run_id.nunique()
    n = out.n.where(out.n > 0)
    out["mean"] = out.s1 / n
    out["var"] = ((out.s2 - out.s1 * out.s1 / n) / (n - 1).where(n > 1)).clip(lower=0).fillna(0.0)
    out["time_us"] = np.exp(out["mean"])
    out["busbw_gbps"] = out.bytes_factor / out.time_us
    return out.drop(columns=["s1", "s2", "bytes_factor"])


def _between(both: pd.DataFrame, base_rows: pd.DataFrame, d: pd.Series, m: int) -> pd.DataFrame:
    """Per matched key: the judge's limit on d (its run-to-run noise) and where it was read, from
    its family (backend, topology, regime). Contention: each key's change is scaled by its widening
    relative to the family's median (a row measured while the CPU was taken spreads wider than its
    family), the level of the family's noise read from its rows, and the quiet host's prior widened
    by the family's median where the CPU bounds its time (judging.contention)."""
    limit_log = pd.Series(np.nan, index=both.index)
    source = pd.Series(None, index=both.index, dtype=object)
    per_run = base_rows[base_rows.n > 0].groupby(["key", "run_id"]).agg(
        n=("n", "sum"), s1=("s1", "sum"), oversub=("oversub", "median")).reset_index()
    per_run = per_run[per_run.key.isin(both.index)]
    per_run["mean"] = per_run.s1 / per_run.n
    per_run["family"] = both.family.reindex(per_run.key).to_numpy()
    run_groups = dict(iter(per_run.groupby("family")))
    for family, idx in both.groupby("family").groups.items():
        first = both.loc[idx[0]]
        latency = first.regime == Regime.LATENCY.value
        widen = both.loc[idx, "widen"].to_numpy()
        typical = float(np.median(widen))
        widen = widen / typical
        prior = prior_for(first.backend, first.topology != "intra", Regime(first.regime))
        if cpu_bound(first.backend, first.topology, latency):
            prior = dataclasses.replace(prior, sigma_log=prior.sigma_log * typical)
        runs = run_groups.get(family)
        if runs is not None:
            scale = spread_factor(runs.oversub.to_numpy())
            sigma, df = run_sigma(runs["mean"].to_numpy(), runs.key.to_numpy(), scale / np.median(scale))
        else:
            sigma, df = None, 0
        if sigma is not None:
            k = both.loc[idx, "runs_base"].to_numpy()
            for key, runs_k, w in zip(idx, k, widen):
                # the new run against the mean of k baseline runs: var sigma^2 (1 + 1/k)
                lim = limit(prior, m, sigma, df, Source.RUNS, inflation=float(np.sqrt(1 + 1 / runs_k)), widen=w)
                limit_log[key], source[key] = lim.log_drop, lim.source.value
            continue
        changes = d[idx].to_numpy() / widen
        whole = robust_sigma(changes) if len(changes) > EXACT_LEAVE_ONE_OUT else None
        for i, key in enumerate(idx):
            others = np.delete(changes, i)
            others = others[np.isfinite(others)]
            sigma = whole if whole is not None else (robust_sigma(others) if len(others) >= 2 else None)
            lim = limit(prior, m, sigma, MAD_EFFICIENCY * len(others) if sigma is not None else 0.0, widen=widen[i])
            limit_log[key], source[key] = lim.log_drop, lim.source.value
    return pd.DataFrame({"between": limit_log, "between_source": source})


def compare(base: pa.Table, new: pa.Table, threshold: float, by: str = "link"
            ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(matched keys with changes, regime, noise limit, its source and flag; keys only in base; keys
    only in new). `base` may hold several runs of the same sweep: their spread is the noise."""
    base_rows = _rows(base, by)
    a, b = _side(base_rows), _side(_rows(new, by))
    both = a.merge(b[["busbw_gbps", "time_us", "n", "mean", "var", "runs", "oversub"]], left_index=True,
                   right_index=True, suffixes=("_base", "_new"))
    m = max(len(both), 1)
    p = 1 - FAMILY_ALPHA / m
    d = both.mean_new - both.mean_base
    # the regime from the faster side: contention and faults only slow a measurement
    both["regime"] = regimes(both.curve.to_numpy(), both.msg_bytes.to_numpy(),
                             np.exp(np.fmin(both.mean_base, both.mean_new)).to_numpy())
    both["family"] = both.backend.astype(str) + "|" + both.topology.astype(str) + "|" + both.regime
    both["widen"] = widening(both.oversub_base.to_numpy(), both.oversub_new.to_numpy(), both.runs_base.to_numpy())
    iterations = quantile(p, None) * np.sqrt(both.var_base / both.n_base + both.var_new / both.n_new)
    between = _between(both, base_rows, d, m)
    noise = np.fmax(between.between, iterations)
    judged = between.between.notna()
    source = between.between_source.where(~(iterations > between.between), "iterations")
    source = source.where(judged, Source.UNJUDGED.value)
    both = both.assign(
        busbw_change=np.exp(-d) - 1,
        time_change=np.exp(d) - 1,
        log_change=d,
        noise_floor=1 - np.exp(-noise),
        noise_source=source,
    )
    both["flag"] = judged & (both.busbw_change < -allowed_drop(np.exp(-noise), threshold))
    both = both.drop(columns=["backend", "curve", "family"])
    cols = SHAPE_KEY + (["link"] if by == "link" else [])
    only_base = a.loc[a.index.difference(b.index), cols]
    only_new = b.loc[b.index.difference(a.index), cols]
    return both.reset_index(drop=True), only_base.reset_index(drop=True), only_new.reset_index(drop=True)


class Verdict(enum.Enum):
    """What a comparison concludes (compare exits 1 on DROPPED, 3 on INCONCLUSIVE, 0 on UNCHANGED)."""

    DROPPED = "dropped"  # a drop beyond the noise it was judged with
    INCONCLUSIVE = "inconclusive"  # nothing beyond the noise, but the noise could not be read well
    UNCHANGED = "unchanged"  # nothing beyond the noise, read from the data


@dataclass(frozen=True)
class Conclusion:
    """A comparison's verdict, why, and how contended each run was."""

    verdict: Verdict
    reasons: list[str] = field(default_factory=list)
    loads: list[RunLoad] = field(default_factory=list)

    @property
    def line(self) -> str:
        """One sentence: "inconclusive: ...; ..." (the summary's first words)."""
        return self.verdict.value + (": " + "; ".join(self.reasons) if self.reasons else "")


def run_loads(table: pa.Table) -> list[RunLoad]:
    """How contended each run of `table` was (its ok rows' medians), in the order the runs appear."""
    ok = table.filter(pc.equal(table.column("status"), Status.OK.value))
    runs = ok.column("run_id").to_numpy(zero_copy_only=False) if ok.num_rows else np.array([], dtype=object)
    cols = {c: _column(ok, c) for c in CONTENTION}
    return [run_load(r, *(cols[c][runs == r] for c in CONTENTION)) for r in dict.fromkeys(runs)]


def conclusion(matched: pd.DataFrame, base: pa.Table, new: pa.Table) -> Conclusion:
    """DROPPED where a row is flagged; else INCONCLUSIVE where rows had only their prior to judge them
    (one baseline run, too few keys of their regime) or where contention spread the bandwidth-bound
    rows so wide that a GROSS_DROP could pass for noise, saying why; else UNCHANGED. A run's
    contention is said where it was beyond CONTENDED (`loads`: every run's)."""
    loads = run_loads(base) + run_loads(new)
    contended = [r.describe() for r in loads if r.contended]
    flagged = int(matched.flag.sum())
    if flagged:
        return Conclusion(Verdict.DROPPED, [f"{flagged} of {len(matched)} row(s) dropped beyond their noise",
                                            *contended], loads)
    reasons = []
    prior_only = matched.noise_source == Source.PRIOR.value
    if prior_only.any():
        regimes_seen = "/".join(sorted(set(matched.regime[prior_only])))
        reasons.append(f"run the baseline again: {int(prior_only.sum())} of {len(matched)} row(s) had only their "
                       f"platform's prior ({regimes_seen}-bound) to judge them (one baseline run, fewer than 3 rows of "
                       "their backend, topology and regime), so only a drop beyond any plausible noise would show")
    busy = ((matched.regime == Regime.BANDWIDTH.value) & (matched.noise_floor > 1 - 1 / GROSS_DROP)
            & (np.fmax(matched.oversub_base, matched.oversub_new) > CONTENDED))
    if busy.any():
        reasons.append(f"a host too busy to judge: {int(busy.sum())} of {int((matched.regime == 'bandwidth').sum())} "
                       f"bandwidth-bound row(s), measured with their ranks more than {CONTENDED:g}x oversubscribed, "
                       f"moved so much that a {GROSS_DROP:g}x drop could pass for noise; compare runs measured on a "
                       "quieter host")
    if reasons:
        return Conclusion(Verdict.INCONCLUSIVE, reasons + contended, loads)
    return Conclusion(Verdict.UNCHANGED, [f"no drop beyond the noise in {len(matched)} row(s)", *contended], loads)
