"""The NCCL path on real GPUs: device selection, eager communicators, CUDA-event timing, exact
results on the device, NCCL's own transport account, the memory estimate, float8 on the device and
the overlap workload. Expectations follow this machine's GPU count (1, 2, 8 or any other).
tests/gpu/conftest.py decides first: skipped only without any NVIDIA GPU, failed with the reason
where torch cannot use the GPU; `scripts/gpu_check.sh` runs it and prints one verdict."""

from __future__ import annotations

import os

import pandas as pd
import pytest
import torch

from orchestrator.results import dataset
from tests.gpu.gate import intra_group_sizes
from tests.helpers import run_cli
from workloads.registry import COLLECTIVES

pytestmark = [pytest.mark.gpu]


ONE_RANK = "not exercised (1 rank): NCCL puts no work on the GPU for it"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """One NCCL sweep on every GPU of this machine (one group of one rank on a one-GPU machine):
    scripts/gpu_check.py's own (COLLBENCH_GPU_SWEEP, every collective and dtype, so one sweep serves
    both), else one of its own."""
    given = os.environ.get("COLLBENCH_GPU_SWEEP")
    if given:
        df = dataset.load(given)
        return df, dataset.manifest(given, df.run_id.iloc[0])
    out = tmp_path_factory.mktemp("gpu") / "results"
    proc = run_cli(["run", "--backend", "nccl", "--dtypes", "float32,bfloat16,int8", "-b", "1K", "-e", "256M",
                    "-f", "16", "-n", "10", "-w", "3", "-c", "1", "--patterns", "intra", "--output", str(out)],
                   timeout=85)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    df = pd.read_parquet(out)
    return df, dataset.manifest(str(out), df.run_id.iloc[0])


def test_every_gpu_measured_exactly(sweep):
    df, _ = sweep
    n = torch.cuda.device_count()
    assert (df.status == "ok").all() and (df.n_wrong == 0).all()
    assert set(df.backend) == {"nccl"}
    # every group the intra pattern forms on n GPUs, each on distinct devices, every GPU used
    sizes = intra_group_sizes(n)
    assert sorted(set(df.world_size)) == sizes
    for size in sizes:
        assert df[df.world_size == size].group_id.nunique() == n // size, size
    assert all(len(set(ds)) == len(ds) and all(d.startswith("cuda:") for d in ds) for ds in df.devices)
    assert {d for ds in df.devices for d in ds} == {f"cuda:{i}" for i in range(n)}
    # send_recv needs two ranks: absent on one GPU, on every group size otherwise
    want = set(COLLECTIVES) - ({"send_recv"} if n == 1 else set())
    assert set(df.collective) == want
    assert all(set(df[df.world_size == size].collective) == want for size in sizes)
    assert (df.time_us > 0).all() and (df.time_us_batch > 0).all()
    # each size's GPU memory, measured on the device, within what the memory checks estimate
    assert df.mem_peak_bytes.notna().all() and (df.mem_peak_bytes <= df.mem_estimate_bytes + (2 << 20)).all(), \
        df[df.mem_peak_bytes > df.mem_estimate_bytes + (2 << 20)][["collective", "dtype", "msg_bytes",
                                                                   "mem_peak_bytes", "mem_estimate_bytes"]]
    assert (df[df.world_size >= 2].busbw_gbps > 0).all()


def test_transport_columns_come_from_nccls_log(sweep):
    df, _ = sweep
    name = torch.cuda.get_device_name(0)
    assert set(df.gpu_model) == {name}
    # the loaded library's banner on every row: also the second and later groups of each worker,
    # whose own log lines have no banner (NCCL prints it once per process)
    assert df.nccl_version.notna().all(), df[df.nccl_version.isna()][["group_id", "world_size"]].drop_duplicates()
    versions = set(df.nccl_version)
    assert len(versions) == 1 and versions.pop().count(".") == 2
    multi = df[df.world_size >= 2]
    assert multi.intra_transport.notna().all(), multi.intra_transport.unique()
    assert df[df.world_size == 1].intra_transport.isna().all()  # one rank: NCCL connects no peer
    assert df.net_transport.isna().all()  # one node: nothing crossed a network


def test_memory_estimate_matches_the_device_peak():
    """The harness on one GPU at 1 GiB: peak allocated bytes against sweep.devices.case_bytes."""
    import torch.distributed as dist

    from orchestrator.sweep.devices import case_bytes
    from workloads.harness import run_case
    from workloads.messages import Case

    dist.init_process_group("nccl", store=dist.TCPStore("127.0.0.1", 0, 1, True), rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    try:
        for coll, op, in_place in (("all_reduce", "sum", True), ("all_gather", "none", False)):
            case = Case(coll, "float32", op, in_place, (1 << 28,), 3, 1, 1)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            (sample,) = run_case(case, 0, 1, torch.device("cuda", 0))
            peak = torch.cuda.max_memory_allocated() - base
            estimate = case_bytes(case, 1, "nccl")
            assert sample.n_wrong == 0
            assert 0.9 * estimate <= peak <= 1.05 * estimate + (16 << 20), (coll, peak, estimate)
    finally:
        dist.destroy_process_group()


def test_float8_runs_on_hopper_and_is_refused_elsewhere(tmp_path):
    # every collective and both float8 types: the fill and the check use only what CUDA has for
    # float8 (tests/unit/test_float8_ops.py), and NCCL moves and reduces them
    proc = run_cli(["run", "--backend", "nccl", "--dtypes", "float8_e4m3,float8_e5m2", "--op", "sum,max",
                    "-b", "1K", "-e", "1M", "-f", "32", "-n", "5", "--patterns", "intra",
                    "--output", str(tmp_path / "r")], timeout=45)
    if torch.cuda.get_device_capability(0) >= (9, 0):
        assert proc.returncode == 0, proc.stderr[-2000:]
        df = pd.read_parquet(tmp_path / "r")
        assert (df.status == "ok").all() and (df.n_wrong == 0).all()
        want = set(COLLECTIVES) - ({"send_recv"} if torch.cuda.device_count() == 1 else set())
        assert set(df.collective) == want and set(df.dtype) == {"float8_e4m3", "float8_e5m2"}
    else:
        assert proc.returncode == 2 and "float8 reductions need 9.0 or newer" in proc.stderr


def test_overlap_matmul_is_sized_to_the_collective(tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip(f"overlap {ONE_RANK}")
    proc = run_cli(["run", "--backend", "nccl", "--collectives", "overlap", "-b", "64M", "-e", "256M", "-f", "4",
                    "-n", "10", "--patterns", "intra", "--output", str(tmp_path / "r")], timeout=45)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ov = pd.read_parquet(tmp_path / "r")
    assert (ov.n_wrong == 0).all()
    ratio = ov.t_comp_us / ov.t_comm_us
    assert ratio.between(0.3, 3.0).all(), ratio.tolist()  # not a launch-overhead-sized matmul
