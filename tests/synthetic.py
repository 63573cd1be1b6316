"""Synthetic results datasets whose answers are known: rows generated from a chosen alpha and
bandwidth, with optional planted faults, written through the product's own store."""

from __future__ import annotations

import datetime as dt

import numpy as np

from orchestrator.results.store import ResultStore
from orchestrator.sweep.planner import circle_rounds

SIZES = [1 << k for k in range(10, 27, 2)]  # 1K .. 64M


def write_run(out: str, run_id: str, *, nodes: int = 6, alpha_us: float = 20.0, bw_gbps: float = 10.0,
              intra_bw_gbps: float = 40.0, slow_pair: tuple[int, int] | None = None, slow_factor: float = 0.6,
              straggler: int | None = None, drop: dict | None = None, minute: int = 0, zigzag: float = 0.0) -> None:
    """Pairwise all_reduce over `nodes` nodes (one rank each) plus intra groups of 2 ranks.

    drop: {"msg_bytes": S, "pattern": P, "factor": f} multiplies that row's busbw by f.
    zigzag: the pairwise rows' times 1 + zigzag and 1 - zigzag times the line's, size by size (a shape
    no alpha-beta line fits).
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
                         f"r{rnd}-g{gid}", rnd, straggler, drop, zigzag * (-1) ** i) for i, s in enumerate(SIZES)]
            store.write_group(f"r{rnd}-g{gid}", rows)
            gid += 1
    for i in range(nodes):
        rows = [_row(run_id, started, "intra", "intra", [100 + 2 * i, 101 + 2 * i], [ips[i], ips[i]], s, alpha_us / 4,
                     intra_bw_gbps, f"intra-{i}", 99, None, drop) for s in SIZES]
        store.write_group(f"intra-{i}", rows)


def _row(run_id, started, pattern, topology, ranks, ips, size, alpha_us, bw_gbps, group_id, rnd, straggler, drop,
         off: float = 0.0):
    time_us = (alpha_us + size / (bw_gbps * 1e3)) * (1 + off)
    busbw = size / time_us / 1e3  # all_reduce on 2 ranks: factor 1
    if drop and drop["msg_bytes"] == size and drop["pattern"] == pattern:
        busbw *= drop["factor"]
        time_us /= drop["factor"]
    rank_times = [time_us * (0.5 if r == straggler else 1.0) for r in ranks]  # late: the others wait
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
        "local_ranks": [0, 0] if topology == "inter" else [0, 1],
    }


def write_cluster_run(out: str, run_id: str, *, nodes: int = 4, ranks_per_node: int = 4,
                      patterns: tuple[str, ...] = ("intra", "intra-pairwise", "inter", "pairwise"),
                      sizes: list[int] | None = None, intra_gbps: float = 40.0, inter_gbps: float = 10.0,
                      alpha_us: float = 20.0, faults: tuple = (), noise: float = 0.0, iters: int = 20, seed: int = 0,
                      minute: int = 0, collective: str = "all_reduce", failed_groups: tuple[str, ...] = (),
                      one_file: bool = False, platform: str | None = None, backend: str = "nccl",
                      file_suffix: str = "") -> None:
    """A run over the groups the real planner makes for `nodes` x `ranks_per_node`, with a known
    bus bandwidth per topology and planted faults, written through the product's store.

    faults (each multiplies the bus bandwidth of the groups it touches by `f`):
      ("node_intra", node, f)      the node's intra-node fabric: its intra and intra-pairwise groups
      ("node_nic", node, f)        the node's network: every group that spans it and another node
      ("gpu", node, local, f)      one GPU: intra-pairwise groups that include it
      ("gpu_pair", node, a, b, f)  one GPU-to-GPU link: the intra-pairwise group of exactly that pair
      ("rail", local, f)           one rail: inter groups of that local rank
      ("pair", a, b, f)            one node pair: the pairwise group of exactly those nodes
      ("uplink", nodes, f)         a switch's uplink: every group with nodes both in `nodes` (a
                                   tuple: the switch's) and outside
      ("straggler", rank, x)       the rank's own time is x times its group's (x < 1: it arrives late,
                                   the others wait for it)
      ("rank_noise", sigma)        every rank's own time times a lognormal factor of this sigma
    noise: sigma of a lognormal factor on each iteration's time (0: every iteration identical).
    one_file: all rows in one file (fast for thousands of groups), as a compacted run has them.
    file_suffix: added to each group's file name, so that a second call adds another collective's
    rows to the same run.
    """
    from orchestrator.sweep.inventory import from_description
    from orchestrator.sweep.planner import make_plan
    from orchestrator.sweep.spec import SweepSpec
    from workloads import registry

    rng = np.random.default_rng(seed)
    sizes = sizes or SIZES
    inv = from_description(f"{nodes}x{ranks_per_node}")
    plan = make_plan(SweepSpec(patterns=patterns), inv)
    first = inv.first_rank()
    node_of = {r: i for i in range(nodes) for r in range(first[i], first[i] + ranks_per_node)}
    ips = [f"10.0.0.{10 + i}" for i in range(nodes)]
    started = dt.datetime(2026, 11, 29, 12, minute, tzinfo=dt.timezone.utc)
    store = ResultStore(out, run_id)
    store.create()
    factor_of = registry.get(collective).busbw_factor
    everything = []
    for group in plan.groups:
        members = [node_of[r] for r in group.ranks]
        local = [r - first[node_of[r]] for r in group.ranks]
        spanned = sorted(set(members))
        topology = "intra" if len(spanned) == 1 else "inter" if len(spanned) == len(members) else "mixed"
        bw = intra_gbps if topology == "intra" else inter_gbps
        straggle = {}
        for fault in faults:
            kind, *args = fault
            f = args[-1]
            if kind == "node_intra" and topology == "intra" and members[0] == args[0]:
                bw *= f
            elif kind == "node_nic" and topology != "intra" and args[0] in spanned:
                bw *= f
            elif kind == "gpu" and group.pattern == "intra-pairwise" and members[0] == args[0] and args[1] in local:
                bw *= f
            elif kind == "gpu_pair" and group.pattern == "intra-pairwise" and members[0] == args[0] \
                    and sorted(local) == sorted(args[1:3]):
                bw *= f
            elif kind == "rail" and group.pattern == "inter" and local[0] == args[0]:
                bw *= f
            elif kind == "pair" and group.pattern == "pairwise" and spanned == sorted(args[:2]):
                bw *= f
            elif kind == "uplink" and set(spanned) & set(args[0]) and set(spanned) - set(args[0]):
                bw *= f
            elif kind == "straggler" and args[0] in group.ranks:
                straggle[group.ranks.index(args[0])] = f
            elif kind == "rank_noise":
                straggle = {j: straggle.get(j, 1.0) * float(np.exp(rng.normal(0.0, f))) for j in range(len(group.ranks))}
        n = len(group.ranks)
        factor = factor_of(n) if n > 1 else 1.0
        base = {
            "run_id": run_id, "started_at": started, "collective": collective, "backend": backend, "dtype": "float32",
            "op": "sum", "in_place": True, "world_size": n, "n_nodes": len(spanned),
            "ranks_per_node": max(members.count(m) for m in spanned), "topology": topology, "pattern": group.pattern,
            "group_id": group.group_id, "round": group.round, "groups_in_round": 1, "ranks": list(group.ranks),
            "local_ranks": local, "hosts": [f"host{10 + m}" for m in members], "node_ips": [ips[m] for m in members],
            "node_ids": [f"id-{ips[m]}" for m in members], "devices": [f"gpu:{x}" for x in local],
            "pids": list(range(n)), "iters": iters, "warmup": 5, "check_iters": 1, "gpu_model": "NVIDIA H100",
            "nccl_version": "2.21.5", "platform": platform,
        }
        rows = []
        for size in sizes:
            row = {**base, "msg_bytes": size, "count": size // 4}
            if group.group_id in failed_groups:
                rows.append({**row, "status": "timeout", "error": "deadline of 300.0s passed during measure; ranks 1",
                             "failed_ranks": [1]})
                continue
            t = alpha_us + size / (bw / factor * 1e3)
            samples = t * np.exp(rng.normal(0.0, noise, iters)) if noise else np.full(iters, t)
            time_us = float(samples.mean())
            busbw = size / time_us / 1e3 * factor
            rows.append({**row, "time_us": time_us, "time_us_p50": float(np.median(samples)),
                         "time_us_min": float(samples.min()), "time_us_max": float(samples.max()),
                         "time_cv": float(samples.std() / time_us), "algbw_gbps": busbw / factor, "busbw_gbps": busbw,
                         "time_us_batch": time_us, "busbw_gbps_batch": busbw, "n_wrong": 0, "status": "ok",
                         "iter_time_us": samples.tolist(),
                         "rank_time_us": [time_us * straggle.get(j, 1.0) for j in range(n)]})
        if one_file:
            everything += rows
        else:
            store.write_group(group.group_id + file_suffix, rows)
    if one_file:
        store.write_group("part-00000", everything)
