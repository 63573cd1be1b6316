"""Rows that time torch's dispatch, not the fabric (issue 56): every worker measures c10d's own cost
of one call (a one-rank in-place all_reduce, which moves nothing); a row within DISPATCH_BOUND of
its group's floor says so, and the report counts them. On the recorded H200 rows, whose manifest
predates the measurement, the floor is the run's own one-rank in-place all_reduces."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.distributed as dist

from orchestrator.analysis import dispatch
from orchestrator.execution import rows
from orchestrator.judging.defaults import DISPATCH_BOUND
from orchestrator.sweep.planner import Group
from workloads import clocks
from workloads.messages import Case, Sample, WorkerInfo

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "gpu" / "h200_20261204" / "results"


def test_the_recorded_h200_rows_below_a_few_mib_time_the_dispatch():
    df = pd.read_parquet(H200)
    alone = df[(df.world_size == 1) & (df.collective == "all_reduce") & df.in_place & (df.status == "ok")]
    assert len(alone) == 32 and dispatch.floor_from_rows(df) == pytest.approx(alone.time_us.median())
    floor = alone.time_us.median()
    assert 40 < floor < 45  # NCCL launched nothing: 40-48 us a call is c10d's dispatch on that VM
    flagged = dispatch.bound(df)
    gather = df[(df.collective == "all_gather") & ~df.in_place.astype(bool)]
    # 1K and 64K out-of-place all_gathers (a copy of a few KiB) are the floor; 256M copies 256 MiB: 84 us
    assert flagged[gather.index[gather.msg_bytes <= 65536]].all()
    assert not flagged[gather.index[gather.msg_bytes == 1 << 28]].any()
    assert (flagged == (df.time_us < DISPATCH_BOUND * floor)).all()
    line = dispatch.warning(df)
    assert line.startswith(f"{int(flagged.sum())} of 288 rows (up to 256M) take less than 1.5x the dispatch floor "
                           f"({floor:.1f} us a call") and "from this run's one-rank in-place all_reduces" in line


def test_a_rows_own_floor_decides_and_rows_without_one_say_nothing():
    df = pd.DataFrame({"status": "ok", "collective": "all_reduce", "in_place": True, "world_size": 8,
                       "msg_bytes": [1024, 1 << 20, 1 << 28], "time_us": [50.0, 60.0, 900.0],
                       "dispatch_floor_us": [40.0, 40.0, 40.0]})
    assert list(dispatch.bound(df)) == [True, False, False]  # 60 us is 1.5x: no longer within
    assert dispatch.warning(df).startswith("1 of 3 rows (up to 1K) take less than 1.5x the dispatch floor (40.0 us")
    unknown = df.assign(dispatch_floor_us=float("nan"))
    assert dispatch.bound(unknown).isna().all() and dispatch.warning(unknown) is None


def test_rows_carry_their_groups_floor_and_whether_each_size_is_within_it():
    workers = [WorkerInfo(node_id="n1", node_ip="10.0.0.1", hostname="h", pid=p, gpu_ids=(), cpu_model="cpu",
                          torch_version="2.13.0", nccl_version=None, dispatch_floor_us=f, gpu_dispatch_floor_us=9.0)
               for p, f in ((1, 18.0), (2, 20.0))]
    base = rows.group_base(rows.RunRef("r", dt.datetime(2026, 12, 7, tzinfo=dt.timezone.utc)), "gloo",
                           Group("r0-g0", "intra", 0, (0, 1)), 1, workers, [0, 1], None)
    assert base["dispatch_floor_us"] == 20.0  # the slowest rank's: every call waits for it
    case = Case("all_reduce", "float32", "sum", True, (8, 1 << 20), iters=1, warmup=0, check_iters=0)
    per_rank = [[Sample(8, (25.0,), 0, 25.0), Sample(1 << 20, (400.0,), 0, 400.0)]] * 2
    small, large = rows.measured_rows(base, case, per_rank)
    assert (small["dispatch_bound"], large["dispatch_bound"]) == (True, False)  # 25 < 30 us; 400 is not
    nccl = rows.group_base(rows.RunRef("r", dt.datetime(2026, 12, 7, tzinfo=dt.timezone.utc)), "nccl",
                           Group("r0-g0", "intra", 0, (0, 1)), 1, workers, [0, 1], None)
    assert nccl["dispatch_floor_us"] == 9.0  # NCCL's, measured on the GPU
    unknown = [dataclasses.replace(w, dispatch_floor_us=None) for w in workers]
    base = rows.group_base(rows.RunRef("r", dt.datetime(2026, 12, 7, tzinfo=dt.timezone.utc)), "gloo",
                           Group("r0-g0", "intra", 0, (0, 1)), 1, unknown, [0, 1], None)
    assert rows.measured_rows(base, case, per_rank)[0]["dispatch_bound"] is None


def test_a_worker_measures_gloos_dispatch_floor_and_leaves_no_group_behind():
    floor = clocks.dispatch_floor_us("gloo", torch.device("cpu"), iters=50)
    assert 0 < floor < 10_000 and not dist.is_initialized()  # a real call's cost: microseconds, not seconds
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        assert clocks.dispatch_floor_us("gloo", torch.device("cpu")) is None  # the default group is in use
    finally:
        dist.destroy_process_group()
