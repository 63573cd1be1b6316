"""Result rows, built in one place. Pure: no Ray, no I/O.

A row is a dict keyed by the columns of `results.schema.ROW_SCHEMA`; `check_keys` refuses any other
key, so a misspelt column is an error here rather than a silent null in Parquet.
Every row of a group starts from the group's base (who ran, where); a measured row adds the case,
the combined timing of all ranks and the bandwidths; an unmeasured row (failed, timeout,
skipped) adds the case, the status and the error.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.execution import stats
from orchestrator.judging.defaults import DISPATCH_BOUND
from orchestrator.results.schema import check_columns
from workloads import traffic
from workloads.dtypes import ELEMENT_BYTES
from workloads.messages import Case, HostLoad, Joined, ReplayOp, ReplayTiming, Sample, Status, WorkerInfo, topology_of
from workloads.registry import collective_of


@dataclass(frozen=True)
class RunRef:
    """What every row of a run carries."""

    run_id: str
    started_at: dt.datetime


def where(row: dict, j: int) -> str:
    """Group rank j's host with its IP (hostnames can coincide, as in the lab's namespaces), from
    a group's base or any of its rows."""
    return f"{row['hosts'][j]} ({row['node_ips'][j]})"


def check_keys(row: dict) -> dict:
    check_columns(row)
    return row


def group_base(run: RunRef, backend: str, group, groups_in_round: int, workers: Sequence[WorkerInfo],
               local_ranks: Sequence[int], pair_nodes: list[str] | None,
               platforms: Mapping[str, Sequence[str]] | None = None,
               domains: Mapping[str, str] | None = None) -> dict:
    """The columns shared by every row of one group: `workers` and `local_ranks` by group rank;
    `platforms` (node id -> platform tags) gives the tags all of the group's nodes share; `domains`
    (node id -> NVLink domain, where the probe found one) makes a group of one domain's nodes
    intra-domain."""
    per_node = Counter(w.node_id for w in workers)
    shared = set.intersection(*(set(platforms.get(n, ())) for n in per_node)) if platforms else set()
    return check_keys({
        "run_id": run.run_id,
        "started_at": run.started_at,
        "backend": backend,
        "world_size": len(workers),
        "n_nodes": len(per_node),
        "ranks_per_node": max(per_node.values()),
        "topology": topology_of([w.node_id for w in workers],
                                [domains.get(w.node_id) for w in workers] if domains else None).value,
        "pattern": group.pattern,
        "phase": group.phase,
        "group_id": group.group_id,
        "round": group.round,
        "groups_in_round": groups_in_round,
        "ranks": list(group.ranks),
        "local_ranks": list(local_ranks),
        "hosts": [w.hostname for w in workers],
        "node_ips": [w.node_ip for w in workers],
        "node_ids": [w.node_id for w in workers],
        "scheduler_nodes": [w.scheduler_node for w in workers] if any(w.scheduler_node for w in workers) else None,
        "devices": [_device(w) for w in workers],
        "pids": [w.pid for w in workers],
        "pair_nodes": pair_nodes,
        "dispatch_floor_us": _largest(w.dispatch_floor(backend) for w in workers),
        "platform": "+".join(sorted(shared)) or None,
    })


def joined_fields(joined: Sequence[Joined]) -> dict:
    """A formed group's columns: each rank's device, the GPU model, and the shortest of its ranks'
    init_process_group: the rank that arrived last waited for no one, so its time is forming the
    communicator once every rank is there (the others' include waiting for it)."""
    return {"devices": [x.device for x in joined],
            "gpu_model": joined[0].device_name if joined[0].device.startswith("cuda") else None,
            "comm_init_s": min((x.init_s for x in joined if x.init_s is not None), default=None)}


LIFECYCLE = ("comm_init_s", "comm_destroy_s")  # the group's communicator, timed by its ranks (schema.py)


def _device(w: WorkerInfo) -> str:
    """The GPU a worker uses (its index into what it sees), or "cpu"."""
    if w.device_index is None:
        return f"gpu:{w.gpu_ids[0]}" if w.gpu_ids else "cpu"
    return "gpu:" + w.comm_env["CUDA_VISIBLE_DEVICES"].split(",")[w.device_index]


def case_fields(base: dict, case: Case, count: int) -> dict:
    return {
        **base,
        "collective": case.collective,
        "dtype": case.dtype,
        "op": case.op,
        "in_place": case.in_place,
        "msg_bytes": count * ELEMENT_BYTES[case.dtype],
        "count": count,
        "iters": case.iters,
        "warmup": case.warmup,
        "check_iters": case.check_iters,
        **(traffic_fields(case, count) if case.traffic is not None else {}),
    }


def traffic_fields(case: Case, count: int) -> dict:
    """An uneven exchange's matrix at this size (workloads.traffic): what the row's bytes are."""
    m, elem = case.traffic, ELEMENT_BYTES[case.dtype]
    cells = traffic.counts(m, count)
    per_rank = traffic.rank_totals(cells)
    sender, receiver = traffic.heaviest_pair(cells)
    return {"traffic_source": case.traffic_source, "traffic_digest": traffic.digest(m),
            "traffic_total_bytes": traffic.total_numel(m, count) * elem,
            "traffic_busiest_bytes": max(per_rank) * elem, "traffic_busiest_rank": per_rank.index(max(per_rank)),
            "traffic_rank_bytes": [b * elem for b in per_rank],
            "traffic_heaviest_pair": [sender, receiver], "traffic_heaviest_bytes": cells[sender][receiver] * elem}


def measured_rows(base: dict, case: Case, per_rank: Sequence[Sequence[Sample]]) -> list[dict]:
    """One row per count of `case` from every rank's samples (`per_rank[rank][k]`)."""
    factor = collective_of(case.collective).busbw_factor(base["world_size"])
    floor = base.get("dispatch_floor_us")  # a call this close times torch, not the fabric
    rows = []
    for k, count in enumerate(case.counts):
        samples = [rank_samples[k] for rank_samples in per_rank]
        row = case_fields(base, case, count)
        if any(not s.iter_time_us for s in samples):  # the group skipped this size
            failed = [j for j, s in enumerate(samples) if s.error]
            error = "; ".join(f"rank {j}: {samples[j].error}" for j in failed) or "not measured"
            rows.append(check_keys({**row, "status": Status.FAILED.value, "error": error, "failed_ranks": failed}))
            continue
        timing = stats.combine([s.iter_time_us for s in samples])
        moved = row.get("traffic_busiest_bytes", row["msg_bytes"])  # nccl-tests' alltoallv: the busiest rank's
        algbw = stats.algbw_gbps(moved, timing["time_us"])
        batch_us = sum(s.batch_us for s in samples) / len(samples)  # nccl-tests: the mean over ranks
        row.update(timing, algbw_gbps=algbw, busbw_gbps=stats.busbw_gbps(algbw, factor), time_us_batch=batch_us,
                   busbw_gbps_batch=stats.busbw_gbps(stats.algbw_gbps(moved, batch_us), factor),
                   n_wrong=sum(s.n_wrong for s in samples), status=Status.OK.value,
                   dispatch_bound=timing["time_us"] < DISPATCH_BOUND * floor if floor else None,
                   mem_peak_bytes=_largest(s.mem_peak_bytes for s in samples),
                   mem_estimate_bytes=_largest(s.mem_estimate_bytes for s in samples),
                   **host_fields([s.host for s in samples]))
        if samples[0].step_us is not None:
            row.update(overlap_fields(samples, timing["time_us"]))
        rows.append(check_keys(row))
    return rows


def _largest(values) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def host_fields(hosts: Sequence[HostLoad | None]) -> dict:
    """The contention columns of a row from its ranks' HostLoad: the CPU they got, as a mean over
    ranks; the waits, the load and the steal, the most of any rank (a collective waits for its
    slowest member, and a node's load is its busiest's)."""
    known = [h for h in hosts if h is not None]
    busy = [h.cpu_busy_frac for h in known if h.cpu_busy_frac is not None]
    return {"cpu_busy_frac": sum(busy) / len(busy) if busy else None,
            "cpu_wait_frac": _largest(h.cpu_wait_frac for h in known),
            "load_per_cpu": _largest(h.load_per_cpu for h in known),
            "steal_frac": _largest(h.steal_frac for h in known)}


def overlap_fields(samples: Sequence[Sample], comm_us: float) -> dict:
    """T_comp, T_step (means of per-iteration maxima over ranks) and what follows from them."""
    comp = stats.combine([s.comp_us for s in samples])["time_us"]
    step = stats.combine([s.step_us for s in samples])["time_us"]
    hidden = comp + comm_us - step
    return {"t_comp_us": comp, "t_comm_us": comm_us, "t_step_us": step, "t_overlap_us": hidden,
            "overlap_efficiency": hidden / min(comp, comm_us), "compute_flops": samples[0].compute_flops}


def unmeasured_rows(base: dict, cases: Sequence[Case], status: Status, error: str,
                    failed_ranks: Sequence[int] | None = None) -> list[dict]:
    """A row for every count of `cases` that was not measured; one row for the group itself
    when no case is left (a failure while leaving, or a group with nothing to measure)."""
    extra = {"status": status.value, "error": error,
             "failed_ranks": list(failed_ranks) if failed_ranks is not None else None}
    rows = [{**case_fields(base, case, count), **extra} for case in cases for count in case.counts]
    return [check_keys(r) for r in rows or [{**base, **extra}]]


_PER_RANK = ("ranks", "local_ranks", "hosts", "node_ips", "node_ids", "devices", "pids")


def replay_rows(base: dict, case: Case, per_rank: Sequence[Sequence[ReplayTiming]]) -> list[dict]:
    """One row per traced op instance (process group, sequence number, step) of a replay: its
    group's ranks, where they ran, and the slowest member's time. `per_rank[j]` is trace rank j's
    timings (group rank j of the replay's group is trace rank j)."""
    program = case.replay
    labels = {name: label for name, label, _ in program.groups}
    members: dict[tuple, dict[int, float]] = {}
    first: dict[tuple, ReplayOp] = {}
    for j, timings in enumerate(per_rank):
        for t in timings:
            op = program.ops[j][t.op]
            key = (t.repeat * program.steps + op.step, op.group, op.seq, op.part, op.kind)
            members.setdefault(key, {})[j] = t.time_us
            first.setdefault(key, op)
    out = []
    for key in sorted(members, key=lambda k: (k[0], k[2], k[3], k[1])):
        step, group, seq, _, kind = key
        op, times = first[key], members[key]
        js = sorted(times)
        where = {c: [base[c][j] for j in js] for c in _PER_RANK}
        if base.get("scheduler_nodes"):
            where["scheduler_nodes"] = [base["scheduler_nodes"][j] for j in js]
        per_node = Counter(where["node_ids"])
        count = op.out_numel if kind == "all_gather" else op.in_numel
        row = {**base, **where, "world_size": len(js), "n_nodes": len(per_node),
               "ranks_per_node": max(per_node.values()),
               "topology": topology_of(where["node_ids"]).value, "collective": kind, "dtype": op.dtype,
               "op": "sum" if kind in ("all_reduce", "reduce", "reduce_scatter") else "none", "in_place": kind in
               ("all_reduce", "broadcast", "reduce"), "msg_bytes": op.msg_bytes, "count": count, "iters": 1,
               "warmup": program.warmup_steps, "check_iters": 0, "step": step, "seq": seq,
               "process_group": labels.get(group, group), "trace_time_us": op.traced_us, "status": Status.OK.value}
        row.update(stats.combine([[times[j]] for j in js]))
        if kind in REPLAYED_COLLECTIVES:
            algbw = stats.algbw_gbps(op.msg_bytes, row["time_us"])
            row.update(algbw_gbps=algbw, busbw_gbps=stats.busbw_gbps(
                algbw, collective_of(kind).busbw_factor(len(js))))
        out.append(check_keys(row))
    return out


# the replayed ops that are sweep collectives too (bandwidth columns; a barrier has none)
REPLAYED_COLLECTIVES = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce"})
