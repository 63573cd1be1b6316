"""A replayed job's steps (rows with pattern "replay"): the communication time of each step, as
the slowest rank spends it (the sum of the ops it is in), and each process group's share. Pure."""

from __future__ import annotations

from collections import defaultdict

import pandas as pd

from workloads.messages import Status

PATTERN = "replay"
STEP_COLUMNS = ("step", "ops", "comm_ms", "slowest_rank", "traced_ms", "groups")
GROUP_COLUMNS = ("process_group", "world_size", "topology", "collectives", "ops_per_step", "ms_per_step", "share")


def step_times(rows: pd.DataFrame) -> dict[int, dict]:
    """step -> {comm_us, rank (the slowest), ops, traced_us (the job's own, where known), by_group_us}.
    `rows`: replay rows with step, process_group, ranks, time_us, trace_time_us."""
    per_step: dict[int, dict] = {}
    ok = rows[(rows.status == Status.OK) & rows.step.notna()]
    for step, g in ok.groupby("step", observed=True):
        per_rank: dict[int, float] = defaultdict(float)
        traced: dict[int, float] = defaultdict(float)
        by_group: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        has_traced = g.trace_time_us.notna().all() if "trace_time_us" in g else False
        for ranks, t, pg, tr in zip(g.ranks, g.time_us, g.process_group, g.get("trace_time_us", [None] * len(g))):
            for r in ranks:
                per_rank[int(r)] += float(t)
                by_group[int(r)][pg] += float(t)
                if has_traced:
                    traced[int(r)] += float(tr)
        slowest = max(per_rank, key=per_rank.get)
        per_step[int(step)] = {"comm_us": per_rank[slowest], "rank": slowest, "ops": len(g),
                               "traced_us": max(traced.values()) if has_traced else None,
                               "by_group_us": dict(by_group[slowest])}
    return per_step


def tables(rows: pd.DataFrame) -> dict[str, list[dict]]:
    """`replay_steps` (one row per step) and `replay_groups` (one row per process group)."""
    rows = rows[rows.pattern == PATTERN]
    if rows.empty:
        return {"replay_steps": [], "replay_groups": []}
    steps = step_times(rows)
    step_rows = [{"step": s, "ops": v["ops"], "comm_ms": v["comm_us"] / 1e3, "slowest_rank": v["rank"],
                  "traced_ms": v["traced_us"] / 1e3 if v["traced_us"] is not None else None,
                  "groups": ", ".join(f"{pg} {us / 1e3:.3g} ms" for pg, us in sorted(v["by_group_us"].items()))}
                 for s, v in sorted(steps.items())]
    total = sum(v["comm_us"] for v in steps.values()) or 1.0
    group_rows = []
    ok = rows[(rows.status == Status.OK) & rows.step.notna()]
    for pg, g in ok.groupby("process_group", observed=True):
        in_slowest = sum(v["by_group_us"].get(pg, 0.0) for v in steps.values())
        group_rows.append({"process_group": pg, "world_size": int(g.world_size.max()),
                           "topology": "/".join(sorted(set(g.topology))),
                           "collectives": ",".join(sorted(set(g.collective))),
                           "ops_per_step": len(g) / max(g.step.nunique(), 1),
                           "ms_per_step": in_slowest / len(steps) / 1e3, "share": in_slowest / total})
    return {"replay_steps": step_rows, "replay_groups": group_rows}
