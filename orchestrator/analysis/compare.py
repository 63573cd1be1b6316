"""Two runs row by row: busbw and time changes of matched rows, the noise each change has to
beat, and rows found in one run only. Pure; no Ray, no I/O.

Rows match by shape (collective, dtype, op, placement, msg_bytes, topology, world size, ranks per
node, pattern) and, by default, by link: the group's devices (node IP and local rank of every
rank, in rank order), so a pair that lost 40% among many is compared with itself, not hidden in a
median. `by="shape"` pools every group of a shape instead (two different clusters).

Noise: every row keeps its per-iteration times (`iter_time_us`). For each matched key the
change is measured on log times: d = mean(log t_new) - mean(log t_base), with standard error
se = sqrt(var_base / n_base + var_new / n_new) over the iterations of all its rows. A drop is
flagged when busbw fell by more than `threshold` AND d exceeds z * se, z being the one-sided
normal quantile at 5% shared by all m matched keys (Bonferroni: 1 - 0.05 / m), so that comparing
a run with a resampling of itself flags nothing in 95% of comparisons however many rows there
are. The row's `noise_floor` is the busbw change that noise alone can explain: 1 - exp(-z * se).
"""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

SHAPE_KEY = ["collective", "dtype", "op", "in_place", "msg_bytes", "topology", "world_size", "ranks_per_node",
             "pattern"]
COLUMNS = [*SHAPE_KEY, "status", "busbw_gbps", "time_us", "iter_time_us", "node_ips", "local_ranks", "run_id"]
FAMILY_ALPHA = 0.05


def _links(table: pa.Table) -> np.ndarray:
    """Each row's devices, "ip:local,ip:local,..." in rank order."""
    ips = table.column("node_ips").combine_chunks()
    locals_ = table.column("local_ranks").combine_chunks()
    if locals_.null_count == len(locals_):  # written before local_ranks existed: nodes only
        return pc.binary_join(ips, ",").to_numpy(zero_copy_only=False)
    pairs = pc.binary_join_element_wise(ips.values, pc.cast(locals_.values, pa.string()), ":")
    joined = pa.ListArray.from_arrays(ips.offsets, pairs)
    return pc.binary_join(joined, ",").to_numpy(zero_copy_only=False)


def _log_stats(table: pa.Table, key: pd.Series) -> pd.DataFrame:
    """Per key: n iterations, mean and variance of log(time)."""
    times = table.column("iter_time_us").combine_chunks()
    lengths = np.diff(times.offsets.to_numpy())
    logs = np.log(np.maximum(times.values.to_numpy(zero_copy_only=False), 1e-9))
    owner = np.repeat(key.to_numpy(), lengths)
    flat = pd.DataFrame({"key": owner, "x": logs})
    return flat.groupby("key").x.agg(n="size", mean="mean", var="var").fillna({"var": 0.0})


def _side(table: pa.Table, by: str) -> pd.DataFrame:
    ok = table.filter(pc.equal(table.column("status"), "ok"))
    df = ok.select(SHAPE_KEY + ["busbw_gbps", "time_us"]).to_pandas()
    df["link"] = _links(ok) if by == "link" else ""
    key = df[SHAPE_KEY + ["link"]].astype(str).agg("|".join, axis=1)
    stats = _log_stats(ok, key)
    agg = df.assign(key=key).groupby("key").agg(**{c: (c, "first") for c in SHAPE_KEY + ["link"]},
                                                busbw_gbps=("busbw_gbps", "median"), time_us=("time_us", "median"))
    return agg.join(stats)


def compare(base: pa.Table, new: pa.Table, threshold: float, by: str = "link"
            ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(matched keys with changes, noise floor and flag; keys only in base; keys only in new)."""
    a, b = _side(base, by), _side(new, by)
    both = a.merge(b[["busbw_gbps", "time_us", "n", "mean", "var"]], left_index=True, right_index=True,
                   suffixes=("_base", "_new"))
    m = max(len(both), 1)
    z = NormalDist().inv_cdf(1 - FAMILY_ALPHA / m)
    d = both.mean_new - both.mean_base
    se = np.sqrt(both.var_base / both.n_base + both.var_new / both.n_new)
    both = both.assign(
        busbw_change=both.busbw_gbps_new / both.busbw_gbps_base - 1,
        time_change=both.time_us_new / both.time_us_base - 1,
        noise_floor=1 - np.exp(-z * se),
    )
    both["flag"] = (both.busbw_change < -threshold) & (d > z * se)
    cols = SHAPE_KEY + (["link"] if by == "link" else [])
    only_base = a.loc[a.index.difference(b.index), cols]
    only_new = b.loc[b.index.difference(a.index), cols]
    return both.reset_index(drop=True), only_base.reset_index(drop=True), only_new.reset_index(drop=True)
