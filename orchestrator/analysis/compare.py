"""Two runs (or several baseline runs and one new run) row by row: busbw and time changes of
matched rows, the noise each change has to beat and where that noise was read, and rows found on
one side only. Pure; no Ray, no I/O.

Rows match by shape (collective, dtype, op, placement, msg_bytes, topology, world size, ranks per
node, pattern) and, by default, by link: the group's devices (node IP and local rank of every
rank, in rank order), so a pair that lost 40% among many is compared with itself, not hidden in a
median. `by="shape"` pools every group of a shape instead (two different clusters).

The change of a matched key is measured on log times: d = mean(log t_new) - mean(log t_base)
over the iterations of its rows (all baseline runs together; a row without them, imported from
nccl-tests without -I, counts its mean time as one), and judged by the one judge
(judging/judge.py) against the key's own past: how far a healthy link moves between runs is read
from several baseline runs where they exist (`runs`), else from the other matched links of its
shape, the judged one left out (`peers`), each pooled with the platform's prior (gloo inside a
node, gloo across nodes, NCCL), or from the prior alone where the shape has one or two links
(`prior`); Student's t at 1 - 0.05/m (m matched keys, Bonferroni), capped at a 3x drop, which is
never passed as noise. A drop is flagged when busbw fell by more than `threshold` AND d exceeds
that limit and the row's own iteration noise (z * se, se = sqrt(var_base / n_base + var_new /
n_new); `iterations` where it is the larger). `noise_floor` is the busbw change that noise alone
can explain: 1 - exp(-limit). So 4 links flag a 10x drop (issue 32: a 50x drop on 4 links once
passed, its floor 99.9%) and not a 30% wobble.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from orchestrator.judging.judge import EXACT_LEAVE_ONE_OUT, Source, limit, prior_for, robust_sigma
from orchestrator.judging.stats import FAMILY_ALPHA, MAD_EFFICIENCY, quantile, run_sigma
from workloads.messages import Status

SHAPE_KEY = ["collective", "dtype", "op", "in_place", "msg_bytes", "topology", "world_size", "ranks_per_node",
             "pattern"]
COLUMNS = [*SHAPE_KEY, "status", "busbw_gbps", "time_us", "iter_time_us", "node_ips", "local_ranks", "run_id",
           "backend"]



def _links(table: pa.Table) -> np.ndarray:
    """Each row's devices, "ip:local,ip:local,..." in rank order."""
    ips = table.column("node_ips").combine_chunks()
    locals_ = table.column("local_ranks").combine_chunks()
    if locals_.null_count == len(locals_):  # written before local_ranks existed: nodes only
        return pc.binary_join(ips, ",").to_numpy(zero_copy_only=False)
    pairs = pc.binary_join_element_wise(ips.values, pc.cast(locals_.values, pa.string()), ":")
    joined = pa.ListArray.from_arrays(ips.offsets, pairs)
    return pc.binary_join(joined, ",").to_numpy(zero_copy_only=False)


def _rows(table: pa.Table, by: str) -> pd.DataFrame:
    """The ok rows: shape, link, key, shape id, run, busbw, time and their iterations' log sums."""
    ok = table.filter(pc.equal(table.column("status"), Status.OK.value))
    extra = ["backend"] if "backend" in ok.column_names else []
    df = ok.select(SHAPE_KEY + ["busbw_gbps", "time_us", "run_id", *extra]).to_pandas()
    if not extra:
        df["backend"] = None
    link = pa.array(_links(ok), pa.string()) if by == "link" else pa.array([""] * ok.num_rows, pa.string())
    shape = pc.binary_join_element_wise(*(pc.cast(ok.column(c), pa.string()) for c in SHAPE_KEY), "|")
    df["link"] = link.to_numpy(zero_copy_only=False)
    df["shape"] = shape.to_numpy(zero_copy_only=False)
    df["key"] = pc.binary_join_element_wise(shape, link, "|").to_numpy(zero_copy_only=False)
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
    return df


def _side(df: pd.DataFrame) -> pd.DataFrame:
    """Per key: its shape and link, median busbw and time, iterations n, mean and variance of log(time)."""
    g = df.groupby("key", sort=False)
    out = df.drop_duplicates("key").set_index("key")[SHAPE_KEY + ["link", "shape", "backend"]]
    out = out.join(g[["busbw_gbps", "time_us"]].median()).join(g[["n", "s1", "s2"]].sum())
    out["runs"] = g.run_id.nunique()
    n = out.n.where(out.n > 0)
    out["mean"] = out.s1 / n
    out["var"] = ((out.s2 - out.s1 * out.s1 / n) / (n - 1).where(n > 1)).clip(lower=0).fillna(0.0)
    return out.drop(columns=["s1", "s2"])


def _between(both: pd.DataFrame, base_rows: pd.DataFrame, d: pd.Series, m: int) -> pd.DataFrame:
    """Per matched key: the judge's limit on d (its run-to-run noise) and where it was read."""
    limit_log = pd.Series(np.nan, index=both.index)
    source = pd.Series(None, index=both.index, dtype=object)
    per_run = base_rows[base_rows.n > 0].groupby(["key", "run_id"]).agg(shape=("shape", "first"), n=("n", "sum"),
                                                                        s1=("s1", "sum")).reset_index()
    per_run["mean"] = per_run.s1 / per_run.n
    run_groups = dict(iter(per_run.groupby("shape")))
    for shape, idx in both.groupby("shape").groups.items():
        first = both.loc[idx[0]]
        prior = prior_for(first.backend, first.topology != "intra")
        runs = run_groups.get(shape)
        sigma, df = run_sigma(runs["mean"].to_numpy(), runs.key.to_numpy()) if runs is not None else (None, 0)
        if sigma is not None:
            k = both.loc[idx, "runs_base"].to_numpy()
            for key, runs_k in zip(idx, k):
                # the new run against the mean of k baseline runs: var sigma^2 (1 + 1/k)
                lim = limit(prior, m, sigma, df, Source.RUNS, inflation=float(np.sqrt(1 + 1 / runs_k)))
                limit_log[key], source[key] = lim.log_drop, lim.source.value
            continue
        changes = d[idx].to_numpy()
        whole = robust_sigma(changes) if len(changes) > EXACT_LEAVE_ONE_OUT else None
        for i, key in enumerate(idx):
            others = np.delete(changes, i)
            others = others[np.isfinite(others)]
            sigma = whole if whole is not None else (robust_sigma(others) if len(others) >= 2 else None)
            lim = limit(prior, m, sigma, MAD_EFFICIENCY * len(others) if sigma is not None else 0.0)
            limit_log[key], source[key] = lim.log_drop, lim.source.value
    return pd.DataFrame({"between": limit_log, "between_source": source})


def compare(base: pa.Table, new: pa.Table, threshold: float, by: str = "link"
            ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(matched keys with changes, noise limit, its source and flag; keys only in base; keys only
    in new). `base` may hold several runs of the same sweep: their spread is the noise."""
    base_rows = _rows(base, by)
    a, b = _side(base_rows), _side(_rows(new, by))
    both = a.merge(b[["busbw_gbps", "time_us", "n", "mean", "var", "runs"]], left_index=True, right_index=True,
                   suffixes=("_base", "_new"))
    m = max(len(both), 1)
    p = 1 - FAMILY_ALPHA / m
    d = both.mean_new - both.mean_base
    iterations = quantile(p, None) * np.sqrt(both.var_base / both.n_base + both.var_new / both.n_new)
    between = _between(both, base_rows, d, m)
    noise = np.fmax(between.between, iterations)
    judged = between.between.notna()
    source = between.between_source.where(~(iterations > between.between), "iterations")
    both = both.assign(
        busbw_change=both.busbw_gbps_new / both.busbw_gbps_base - 1,
        time_change=both.time_us_new / both.time_us_base - 1,
        log_change=d,
        noise_floor=1 - np.exp(-noise),
        noise_source=source.where(judged, Source.UNJUDGED.value),
    )
    both["flag"] = judged & (both.busbw_change < -threshold) & (d > noise)
    both = both.drop(columns=["backend"])
    cols = SHAPE_KEY + (["link"] if by == "link" else [])
    only_base = a.loc[a.index.difference(b.index), cols]
    only_new = b.loc[b.index.difference(a.index), cols]
    return both.reset_index(drop=True), only_base.reset_index(drop=True), only_new.reset_index(drop=True)
