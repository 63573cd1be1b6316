"""Rows are built in one pure module: exact figures from known samples, every unmeasured case
recorded, how contended the hosts were, and no key outside the schema."""

import datetime as dt
import time

import pyarrow.parquet as pq
import pytest

from orchestrator.analysis.compare import CONTENTION
from orchestrator.execution import rows
from orchestrator.results.schema import rows_table
from orchestrator.sweep.planner import Group
from workloads.contention import Meter, steal_and_total
from workloads.messages import Case, HostLoad, Sample, Status, Topology, WorkerInfo, topology_of

RUN = rows.RunRef("run-r", dt.datetime(2026, 11, 30, tzinfo=dt.timezone.utc))


def _worker(node: str, pid: int) -> WorkerInfo:
    return WorkerInfo(node_id=node, node_ip=f"10.0.0.{node[-1]}", hostname=f"host{node[-1]}", pid=pid, gpu_ids=(),
                      cpu_model="cpu", torch_version="2.13.0", nccl_version=None)


def _base(nodes=("n1", "n1", "n2")):
    g = Group("r3-g1", "mixed", 3, (4, 5, 6))
    return rows.group_base(RUN, "gloo", g, 2, [_worker(n, 100 + i) for i, n in enumerate(nodes)],
                           list(range(len(nodes))), None)


def test_topology_rule():
    assert topology_of(["a", "a"]) is Topology.INTRA
    assert topology_of(["a", "b", "c"]) is Topology.INTER
    assert topology_of(["a", "a", "b"]) is Topology.MIXED


def test_group_base_says_who_ran_where():
    base = _base()
    assert base["topology"] == "mixed" and base["n_nodes"] == 2 and base["ranks_per_node"] == 2
    assert base["ranks"] == [4, 5, 6] and base["node_ids"] == ["n1", "n1", "n2"] and base["pids"] == [100, 101, 102]
    assert base["hosts"] == ["host1", "host1", "host2"] and base["devices"] == ["cpu"] * 3


def test_measured_rows_combine_ranks_exactly():
    case = Case("all_reduce", "float32", "sum", True, (256, 1024), iters=2, warmup=1, check_iters=1)
    # per rank, per count: rank 2 is the slowest in iteration 0, rank 0 in iteration 1
    per_rank = [
        [Sample(256, (10.0, 40.0), 0, 24.0), Sample(1024, (100.0, 100.0), 0, 100.0)],
        [Sample(256, (20.0, 20.0), 0, 21.0), Sample(1024, (100.0, 100.0), 1, 100.0)],
        [Sample(256, (30.0, 10.0), 0, 21.0), Sample(1024, (100.0, 300.0), 2, 200.0)],
    ]
    first, second = rows.measured_rows(_base(), case, per_rank)
    assert first["iter_time_us"] == [30.0, 40.0] and first["time_us"] == 35.0
    assert first["msg_bytes"] == 1024 and first["count"] == 256 and first["status"] == "ok"
    # 1024 B in 35 us = 0.029257 GB/s; all_reduce on 3 ranks: busbw = algbw * 4/3
    assert first["algbw_gbps"] == pytest.approx(1024 / 35.0 / 1e3)
    assert first["busbw_gbps"] == pytest.approx(1024 / 35.0 / 1e3 * 4 / 3)
    assert first["rank_time_us"] == [25.0, 20.0, 20.0]
    # nccl-tests' figure: each rank's batch time per iteration, averaged over ranks (22 us here)
    assert first["time_us_batch"] == 22.0 and first["busbw_gbps_batch"] == pytest.approx(1024 / 22.0 / 1e3 * 4 / 3)
    assert second["n_wrong"] == 3 and second["time_us"] == 200.0  # mean of (100, 300)
    assert "t_step_us" not in first


def test_overlap_rows_carry_the_step_model():
    case = Case("overlap", "float32", "sum", True, (256,), iters=2, warmup=1, check_iters=1)
    per_rank = [[Sample(256, (10.0, 10.0), 0, 10.0, comp_us=(30.0, 30.0), step_us=(35.0, 35.0), compute_flops=2e6)]] * 2
    (row,) = rows.measured_rows(_base(("n1", "n2")), case, per_rank)
    assert (row["t_comp_us"], row["t_comm_us"], row["t_step_us"]) == (30.0, 10.0, 35.0)
    assert row["t_overlap_us"] == 5.0 and row["overlap_efficiency"] == 0.5 and row["compute_flops"] == 2e6
    assert row["busbw_gbps"] == pytest.approx(1024 / 10.0 / 1e3)  # all_reduce's factor for 2 ranks: 1


def test_a_size_one_rank_could_not_allocate_is_a_failed_row():
    case = Case("all_gather", "float32", "none", False, (6, 12), 2, 1, 1)
    per_rank = [
        [Sample(6, (5.0, 5.0), 0, 5.0), Sample(12, (), 0)],
        [Sample(6, (5.0, 5.0), 0, 5.0), Sample(12, (), 0, error="out of memory for 96 bytes of buffers")],
    ]
    ok, failed = rows.measured_rows(_base(("n1", "n2")), case, per_rank)
    assert ok["status"] == "ok" and failed["status"] == "failed" and failed["msg_bytes"] == 48
    assert failed["failed_ranks"] == [1] and failed["error"] == "rank 1: out of memory for 96 bytes of buffers"
    assert "time_us" not in failed and "busbw_gbps" not in failed


def test_unmeasured_rows_cover_every_count_or_the_group():
    cases = [Case("all_gather", "float32", "none", False, (6, 12), 2, 1, 1),
             Case("broadcast", "int8", "none", True, (48,), 2, 1, 1)]
    out = rows.unmeasured_rows(_base(), cases, Status.TIMEOUT, "deadline", [2])
    assert [(r["collective"], r["msg_bytes"]) for r in out] == [("all_gather", 24), ("all_gather", 48),
                                                               ("broadcast", 48)]
    assert all(r["status"] == "timeout" and r["failed_ranks"] == [2] and r["error"] == "deadline" for r in out)
    (group_row,) = rows.unmeasured_rows(_base(), [], Status.SKIPPED, "node left")
    assert group_row["status"] == "skipped" and group_row["failed_ranks"] is None and "collective" not in group_row
    assert rows_table(out + [group_row]).num_rows == 4


def test_a_key_outside_the_schema_is_refused():
    with pytest.raises(KeyError, match="not a result column: busbw_gpbs"):
        rows.check_keys({"busbw_gpbs": 1.0})
    with pytest.raises(KeyError, match="not a result column: tme_us"):
        rows_table([{"status": "ok", "tme_us": 3.0}])


def test_all_to_allv_rows_record_their_matrix_and_count_the_busiest_ranks_bytes():
    # rank 2 receives 1 + 7 + 2 = 10 units, more than any rank sends (at most 7): it is the busiest
    m = ((5, 0, 1), (0, 0, 7), (3, 0, 2))
    case = Case("all_to_allv", "float32", "none", False, (120,), 2, 1, 1, traffic=m, traffic_source="x.txt")
    samples = [[Sample(120, (50.0, 50.0), 0, 50.0)] for _ in range(3)]
    (row,) = rows.measured_rows(_base(), case, samples)
    # cells at 120 elements for the busiest rank: w * 120 // 10 = w * 12 elements of 4 bytes
    assert row["traffic_busiest_bytes"] == 120 * 4 and row["traffic_busiest_rank"] == 2
    assert row["traffic_total_bytes"] == (5 + 1 + 7 + 3 + 2) * 12 * 4
    assert row["traffic_heaviest_pair"] == [1, 2] and row["traffic_heaviest_bytes"] == 7 * 12 * 4
    assert row["traffic_source"] == "x.txt" and len(row["traffic_digest"]) == 16
    # nccl-tests' alltoallv: algbw = the busiest rank's bytes / time, busbw = algbw * (n-1)/n
    assert row["algbw_gbps"] == pytest.approx(480 / 50.0 / 1e3)
    assert row["busbw_gbps"] == pytest.approx(480 / 50.0 / 1e3 * 2 / 3)
    rows_table([row])  # every field is in the schema


def test_contention_columns_combine_ranks_and_read_back(tmp_path):
    """How contended each rank's host was (workloads.contention): the CPU the ranks got as a mean,
    the waits, load and steal as the most of any rank; written and read back as they were."""
    case = Case("all_reduce", "float32", "sum", True, (256,), iters=2, warmup=1, check_iters=1)
    loads = [HostLoad(0.5, 0.25, 1.5, 0.0), HostLoad(0.7, 0.75, 1.6, None), None]
    per_rank = [[Sample(256, (10.0, 10.0), 0, 10.0, host=h)] for h in loads]
    (row,) = rows.measured_rows(_base(), case, per_rank)
    assert row["cpu_busy_frac"] == pytest.approx(0.6) and row["cpu_wait_frac"] == 0.75
    assert row["load_per_cpu"] == 1.6 and row["steal_frac"] == 0.0
    path = tmp_path / "rows.parquet"
    pq.write_table(rows_table([row]), path)
    back = pq.read_table(path).to_pylist()[0]
    assert {k: back[k] for k in CONTENTION} == {k: row[k] for k in CONTENTION}
    (unknown,) = rows.measured_rows(_base(), case, [[Sample(256, (10.0, 10.0), 0, 10.0)]] * 3)
    assert all(unknown[k] is None for k in CONTENTION)  # a worker that did not say (an older one)


def test_a_rank_reads_its_own_contention():
    """The meter around a busy second's worth of work: the CPU it got and waited for, the load."""
    meter = Meter()
    deadline = time.perf_counter() + 0.2
    while time.perf_counter() < deadline:
        pass
    load = meter.read()
    assert 0.0 < load.cpu_busy_frac <= 1.5  # one thread spinning (and what else the process ran)
    assert load.cpu_wait_frac is None or load.cpu_wait_frac >= 0.0
    assert load.load_per_cpu is None or load.load_per_cpu >= 0.0
    # /proc/stat's aggregate line: user nice system idle iowait irq softirq steal guest guest_nice
    assert steal_and_total("cpu  100 0 50 800 10 0 5 35 0 0\ncpu0 1 2 3 4 5 6 7 8\n") == (35, 1000)
    assert steal_and_total("cpu  100 0 50 800\n") is None  # a kernel that does not count steal


def test_rows_name_nodes_as_their_scheduler_does_and_the_report_drains_by_that_name():
    """Issue 44: rows and flags named the slow node by IP and host name only, never by the name an
    operator drains (Slurm's SLURMD_NODENAME in the workers' environment; Kubernetes' node name
    through COLLBENCH_NODE_NAME). Outside a scheduler the column is null."""
    from dataclasses import replace

    import pyarrow as pa

    from orchestrator.analysis import diagnosis
    from orchestrator.analysis.frame import Frame
    from workloads.comm_env import scheduler_node_name

    assert scheduler_node_name({"SLURMD_NODENAME": "slm2", "COLLBENCH_NODE_NAME": "k8s-1"}) == "slm2"
    assert scheduler_node_name({"COLLBENCH_NODE_NAME": " gke-pool-7 "}) == "gke-pool-7"
    assert scheduler_node_name({"SLURMD_NODENAME": " "}) is None and scheduler_node_name({}) is None
    assert _base()["scheduler_nodes"] is None  # no scheduler: null, not a list of nulls
    named = [replace(_worker(n, 100 + i), scheduler_node=f"slm{n[-1]}") for i, n in enumerate(("n1", "n1", "n2"))]
    base = rows.group_base(RUN, "gloo", Group("r3-g1", "mixed", 3, (4, 5, 6)), 2, named, [0, 1, 0], None)
    assert base["scheduler_nodes"] == ["slm1", "slm1", "slm2"]
    # six nodes' pairs, node 4 at a quarter: the flag names it by its Slurm name first
    ips, n = [f"10.0.0.{10 + i}" for i in range(6)], 6
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
    busbw = [10.0 * (0.25 if 4 in p else 1.0) * (1 + 0.01 * k % 3) for k, p in enumerate(pairs)]
    table = pa.table({
        "run_id": ["r"] * len(pairs), "collective": ["all_reduce"] * len(pairs), "backend": ["gloo"] * len(pairs),
        "dtype": ["float32"] * len(pairs), "op": ["sum"] * len(pairs), "in_place": [True] * len(pairs),
        "msg_bytes": [16 << 20] * len(pairs), "world_size": [2] * len(pairs), "ranks_per_node": [1] * len(pairs),
        "topology": ["inter"] * len(pairs), "pattern": ["pairwise"] * len(pairs), "status": ["ok"] * len(pairs),
        "group_id": [f"g{i}" for i in range(len(pairs))], "busbw_gbps": busbw,
        "node_ips": [[ips[a], ips[b]] for a, b in pairs], "hosts": [[f"h-slm{a}", f"h-slm{b}"] for a, b in pairs],
        "local_ranks": [[0, 0]] * len(pairs), "scheduler_nodes": [[f"slm{a}", f"slm{b}"] for a, b in pairs]})
    (flag,) = [f for f in diagnosis.flags(Frame(table), 0.10) if f.kind == "slow_node"]
    assert flag.nodes == [ips[4]] and flag.message.startswith("slow node slm4 (h-slm4, 10.0.0.14)"), flag.message
