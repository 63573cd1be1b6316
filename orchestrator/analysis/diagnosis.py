"""What a user reads out of a run: intra vs inter, bad pairs, nodes and ranks, failures.
Pure functions of a rows DataFrame; no Ray, no I/O."""

from __future__ import annotations

import numpy as np
import pandas as pd

from workloads.messages import Topology

TOPOLOGIES = tuple(t.value for t in Topology)


def ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[df.status == "ok"]


def headline(df: pd.DataFrame, collective: str) -> tuple[list[dict], dict]:
    """busbw by msg_bytes per topology (largest group of each), the intra/inter ratio, and per
    topology the peak and the smallest size reaching half of it."""
    d = ok_rows(df)
    d = d[d.collective == collective]
    widest = {t: d[d.topology == t].world_size.max() for t in TOPOLOGIES if (d.topology == t).any()}
    series = {
        t: d[(d.topology == t) & (d.world_size == n)].groupby("msg_bytes").busbw_gbps.median()
        for t, n in widest.items()
    }
    rows = []
    for size in sorted(set().union(*[s.index for s in series.values()]) if series else []):
        row = {"msg_bytes": int(size)}
        for t in TOPOLOGIES:
            row[t] = float(series[t][size]) if t in series and size in series[t].index else None
        row["intra/inter"] = row["intra"] / row["inter"] if row["intra"] and row["inter"] else None
        rows.append(row)
    summary = {}
    for t, s in series.items():
        peak = float(s.max())
        half = int(s[s >= peak / 2].index.min())
        summary[t] = {"world_size": int(widest[t]), "peak_busbw": peak, "half_peak_bytes": half}
    return rows, summary


def _node_label(ip: str, host: str) -> str:
    return f"{host} ({ip})" if host else ip


def node_labels(df: pd.DataFrame) -> dict[str, str]:
    """node id -> "host (ip)" for every node in the rows."""
    ids = np.concatenate(df.node_ids.values)
    ips = np.concatenate(df.node_ips.values)
    hosts = np.concatenate(df.hosts.values)
    _, first = np.unique(ids, return_index=True)
    return {ids[i]: _node_label(ips[i], hosts[i]) for i in first}


def pair_results(df: pd.DataFrame, collective: str) -> pd.DataFrame:
    """Median busbw per node pair at the largest message size: pairwise and 2-node inter groups.
    Columns: pair (labels), nodes (sorted node ids), busbw_gbps, msg_bytes, labels."""
    d = ok_rows(df)
    d = d[(d.collective == collective) & (d.n_nodes == 2) & d.pattern.isin(["pairwise", "inter"])]
    if d.empty:
        return pd.DataFrame(columns=["pair", "nodes", "busbw_gbps", "msg_bytes", "labels"])
    d = d[d.msg_bytes == d.msg_bytes.max()]
    labels = node_labels(d)
    # Group ranks are ordered by node: a 2-node group's first and last ranks are on its two nodes.
    keys = pd.Series([tuple(sorted((ids[0], ids[-1]))) for ids in d.node_ids.values], index=d.index)
    agg = d.busbw_gbps.groupby(keys).median()
    out = pd.DataFrame({"nodes": list(agg.index), "busbw_gbps": agg.values})
    out["pair"] = [" - ".join(labels[n] for n in ns) for ns in out.nodes]
    out["msg_bytes"] = int(d.msg_bytes.iloc[0])
    out["labels"] = [{n: labels[n] for n in ns} for ns in out.nodes]
    return out


def diagnose(df: pd.DataFrame, collective: str, threshold: float) -> dict:
    """Pairs and nodes whose busbw is more than `threshold` below the median of their peers;
    ranks whose mean time is more than `threshold` above their group's median (stragglers);
    failed, timed-out and skipped groups."""
    pairs = pair_results(df, collective)
    slow_pairs, slow_nodes = [], []
    if len(pairs) >= 2:
        median = float(pairs.busbw_gbps.median())
        slow = pairs[pairs.busbw_gbps < (1 - threshold) * median].sort_values("busbw_gbps")
        slow_pairs = [{"pair": p.pair, "busbw": p.busbw_gbps, "median": median,
                       "below_median": 1 - p.busbw_gbps / median, "msg_bytes": p.msg_bytes}
                      for p in slow.itertuples()]
        per_node = pairs[["nodes", "busbw_gbps"]].explode("nodes").groupby("nodes").busbw_gbps.median()
        node_median = float(per_node.median())
        labels = {n: lbl for m in pairs.labels for n, lbl in m.items()}
        for n, score in per_node[per_node < (1 - threshold) * node_median].sort_values().items():
            slow_nodes.append({"node": labels[n], "busbw": float(score), "median": node_median,
                               "below_median": 1 - score / node_median})
    return {
        "slow_pairs": slow_pairs,
        "slow_nodes": slow_nodes,
        "stragglers": stragglers(df, threshold),
        "failures": failures(df),
    }


def stragglers(df: pd.DataFrame, threshold: float, top: int = 10) -> list[dict]:
    """Ranks whose own mean time is above their group's median rank, in the median over at least
    three rows."""
    d = ok_rows(df)
    d = d[d.world_size >= 3] if (d.world_size >= 3).any() else d[d.world_size >= 2]
    if d.empty:
        return []
    ranks, ratios, where = [], [], {}
    for n, g in d.groupby("world_size"):
        times = np.stack(g.rank_time_us.values).astype(float)  # rows x ranks
        med = np.median(times, axis=1, keepdims=True)
        keep = med[:, 0] > 0
        r = np.stack(g.ranks.values)[keep]
        ranks.append(r.ravel())
        ratios.append((times[keep] / med[keep]).ravel())
        ips, hosts = np.stack(g.node_ips.values)[keep].ravel(), np.stack(g.hosts.values)[keep].ravel()
        _, first = np.unique(r.ravel(), return_index=True)
        for i in first:
            where.setdefault(int(r.ravel()[i]), _node_label(ips[i], hosts[i]))
    flat = pd.DataFrame({"rank": np.concatenate(ranks), "ratio": np.concatenate(ratios)})
    score = flat.groupby("rank").ratio.agg(["median", "size"])
    # A rank is flagged on evidence from several rows, not on one noisy measurement.
    score = score[(score["median"] > 1 + threshold) & (score["size"] >= 3)]
    score = score.sort_values("median", ascending=False).head(top)
    return [{"rank": int(rank), "node": where[int(rank)], "time_vs_median": float(r["median"]), "rows": int(r["size"])}
            for rank, r in score.iterrows()]


def failures(df: pd.DataFrame) -> list[dict]:
    bad = df[df.status != "ok"]
    out = []
    for gid, g in bad.groupby("group_id", sort=False):
        row = g.iloc[0]
        failed = list(row.failed_ranks) if row.failed_ranks is not None else []
        out.append({"group_id": gid, "status": row.status, "pattern": row.pattern,
                    "hosts": ", ".join(dict.fromkeys(_node_label(i, h) for i, h in zip(row.node_ips, row.hosts))),
                    "failed_ranks": ",".join(str(row.ranks[j]) for j in failed), "error": row.error})
    return out


def precision(df: pd.DataFrame, collective: str) -> list[dict]:
    """Time and busbw across dtypes at equal element counts (the widest group measured), so the
    effect of fewer bytes per element is read off, measured rather than assumed."""
    d = ok_rows(df)
    d = d[d.collective == collective]
    if d.dtype.nunique() < 2:
        return []
    d = d[d.world_size == d.world_size.max()]
    agg = d.groupby(["count", "dtype"]).agg(msg_bytes=("msg_bytes", "first"), time_us=("time_us", "median"),
                                            busbw_gbps=("busbw_gbps", "median")).reset_index()
    shared = agg.groupby("count").dtype.transform("nunique") >= 2
    return [{"count": int(r["count"]), "dtype": r["dtype"], "msg_bytes": int(r.msg_bytes), "time_us": float(r.time_us),
             "busbw": float(r.busbw_gbps)} for _, r in agg[shared].sort_values(["count", "msg_bytes"]).iterrows()]
