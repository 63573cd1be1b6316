"""Synthetic results datasets whose answers are known: rows generated from a chosen alpha and
bandwidth, with optional planted faults, written through the product's own store."""

from __future__ import annotations

import datetime as dt

from orchestrator.results.store import ResultStore
from orchestrator.sweep.planner import circle_rounds

SIZES = [1 << k for k in range(10, 27, 2)]  # 1K .. 64M


def write_run(out: str, run_id: str, *, nodes: int = 6, alpha_us: float = 20.0, bw_gbps: float = 10.0,
              intra_bw_gbps: float = 40.0, slow_pair: tuple[int, int] | None = None, slow_factor: float = 0.6,
              straggler: int | None = None, drop: dict | None = None, minute: int = 0) -> None:
    """Pairwise all_reduce over `nodes` nodes (one rank each) plus intra groups of 2 ranks.

    drop: {"msg_bytes": S, "pattern": P, "factor": f} multiplies that row's busbw by f.
    """
    started = dt.datetime(2026, 11, 29, 12, minute, tzinfo=dt.timezone.utc)
    store = ResultStore(out, run_id)
    store.create()
    ips = [f"10.0.0.{10 + i}" for i in range(nodes)]
    gid = 0
    for rnd, pairs in enumerate(circle_rounds(nodes)):
        for a, b in pairs:
            bw = bw_gbps * (slow_factor if slow_pair and {a, b} == set(slow_pair) else 1.0)
            rows = [_row(run_id, started, "pairwise", "inter", [a, b], [ips[a], ips[b]], s, alpha_us, bw,
                         f"r{rnd}-g{gid}", rnd, straggler, drop) for s in SIZES]
            store.write_group(f"r{rnd}-g{gid}", rows)
            gid += 1
    for i in range(nodes):
        rows = [_row(run_id, started, "intra", "intra", [100 + 2 * i, 101 + 2 * i], [ips[i], ips[i]], s, alpha_us / 4,
                     intra_bw_gbps, f"intra-{i}", 99, None, drop) for s in SIZES]
        store.write_group(f"intra-{i}", rows)


def _row(run_id, started, pattern, topology, ranks, ips, size, alpha_us, bw_gbps, group_id, rnd, straggler, drop):
    time_us = alpha_us + size / (bw_gbps * 1e3)
    busbw = size / time_us / 1e3  # all_reduce on 2 ranks: factor 1
    if drop and drop["msg_bytes"] == size and drop["pattern"] == pattern:
        busbw *= drop["factor"]
        time_us /= drop["factor"]
    rank_times = [time_us * (1.5 if r == straggler else 1.0) for r in ranks]
    return {
        "run_id": run_id, "started_at": started, "collective": "all_reduce", "backend": "nccl", "dtype": "float32",
        "op": "sum", "in_place": True, "msg_bytes": size, "count": size // 4, "world_size": 2,
        "n_nodes": len(set(ips)), "ranks_per_node": 2 if topology == "intra" else 1, "topology": topology,
        "pattern": pattern, "group_id": group_id, "round": rnd, "groups_in_round": 1, "ranks": ranks,
        "hosts": [f"host{ip.split('.')[-1]}" for ip in ips], "node_ips": ips, "node_ids": [f"id-{ip}" for ip in ips],
        "devices": ["cuda:0", "cuda:1"], "pids": [1, 2], "iters": 20, "warmup": 5, "check_iters": 1,
        "time_us": time_us, "time_us_p50": time_us, "time_us_p99": time_us, "time_us_min": time_us,
        "time_us_max": time_us, "time_cv": 0.0, "algbw_gbps": busbw, "busbw_gbps": busbw, "n_wrong": 0,
        "status": "ok", "iter_time_us": [time_us] * 3, "rank_time_us": rank_times,
    }
