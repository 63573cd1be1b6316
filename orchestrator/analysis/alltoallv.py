"""all_to_allv rows (workloads.traffic) as one table: at each group's largest size, its matrix
(source and digest), its bus bandwidth, the busiest rank (the one whose bytes algbw counts), the
heaviest pair, and the slowest rank against its bytes: the lowest of each rank's own rate (its
bytes, the larger of sent and received, over its own time), against the median rank's. Pure.

Inside one all_to_all_v every pair's transfer overlaps every other's, so a pair's own time is not
measured; what the rows hold is each rank's own time, and the matrix's bytes per rank and pair."""

from __future__ import annotations

import statistics

from orchestrator.analysis.frame import Frame
from orchestrator.sweep.sizes import format_bytes
from workloads.messages import Status

NAME = "all_to_allv"
COLUMNS = ("group_id", "topology", "world_size", "msg_bytes", "size", "traffic", "busbw", "busiest_rank",
           "heaviest_pair", "slowest_rank_for_its_bytes")


def table(frame: Frame) -> list[dict]:
    df = frame.df
    if "traffic_digest" not in df:
        return []
    ok = df[(df.collective == NAME) & (df.status == Status.OK) & df.traffic_digest.notna()]
    if ok.empty:
        return []
    largest = ok.loc[ok.groupby("group", observed=True).msg_bytes.idxmax()]
    largest = largest.iloc[sorted(range(len(largest)), key=lambda j: frame.group_id(int(largest.group.iloc[j])))]
    out = []
    for i, r in largest.iterrows():
        lists = frame.lists(int(i))
        ranks, ips, times = lists["ranks"], lists["node_ips"], lists["rank_time_us"] or []

        def who(j: int) -> str:
            return f"rank {ranks[j]} ({ips[j]})" if j < len(ranks) else f"group rank {j}"

        sender, receiver = lists["traffic_heaviest_pair"] or (0, 0)
        moved = lists["traffic_rank_bytes"] or []
        rates = {j: moved[j] / times[j] for j in range(len(times)) if j < len(moved) and moved[j] and times[j] > 0}
        slowest = ""
        if rates:
            j = min(rates, key=rates.get)
            slowest = (f"{who(j)}: {format_bytes(moved[j])} at {rates[j] / 1e3:.3g} GB/s, "
                       f"{rates[j] / statistics.median(rates.values()):.2f}x the median rank's rate")
        out.append({"group_id": frame.group_id(int(r.group)), "topology": r.topology, "world_size": int(r.world_size),
                    "msg_bytes": int(r.msg_bytes), "size": format_bytes(int(r.msg_bytes)),
                    "traffic": f"{r.traffic_source} [{r.traffic_digest}]", "busbw": float(r.busbw_gbps),
                    "busiest_rank": f"{who(int(r.traffic_busiest_rank))}: {format_bytes(int(r.traffic_busiest_bytes))}",
                    "heaviest_pair": f"{who(int(sender))} -> {who(int(receiver))}: "
                                     f"{format_bytes(int(r.traffic_heaviest_bytes))}",
                    "slowest_rank_for_its_bytes": slowest})
    return out
