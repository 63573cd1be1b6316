"""The NCCL path on real GPUs, and its CPU form where there is none: device selection, eager
communicators, CUDA-event timing, exact results on the device, NCCL's own transport account, the
memory estimate, float8 on the device and the overlap workload. Expectations follow the run's own
declarations (its manifest's spec, the registry: tests/gpu/gate.py's `planned`) and the GPU count
(1, 2, 8 or any other). tests/gpu/conftest.py decides first: the GPUs where torch uses them, the
CPU form (gloo on CPU ranks) on a machine without an NVIDIA GPU, a failure with the reason where
torch cannot use the GPU that is there. `scripts/gpu_check.sh` runs them on its own sweep's rows
and prints one verdict; CI runs the CPU form."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import torch

from orchestrator.results import dataset
from tests.gpu.gate import RECORDED, Target, intra_group_sizes, planned
from tests.helpers import run_cli
from workloads.registry import COLLECTIVES

pytestmark = [pytest.mark.gpu]

ONE_RANK = "not exercised (1 rank): NCCL puts no work on the GPU for it"
# the sweep's reductions are measured with both operators, as in gpu_check.py's sweep
OPS = ("sum", "max")


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"


@dataclass(frozen=True)
class Sweep:
    rows: pd.DataFrame
    manifest: dict
    target: Target  # what it ran on
    here: bool = True  # on this machine (else recorded on another: nothing more can be run for it here)


def _read(path: str, target: Target, here: bool = True) -> Sweep:
    df = dataset.load(path)
    return Sweep(df, dataset.manifest(path, df.run_id.iloc[0]), target, here)


@pytest.fixture(scope="module", params=["here", *RECORDED])
def sweep(request, target: Target, tmp_path_factory) -> Sweep:
    """One sweep of every collective: on this machine's target (scripts/gpu_check.py's own,
    COLLBENCH_GPU_SWEEP, every collective and dtype, so one sweep serves both; else one of its own),
    and each run the GPU check recorded on a GPU (its rows read back, judged as on that GPU)."""
    if request.param != "here":
        return _read(str(FIXTURES / request.param / "results" / "sweep"), RECORDED[request.param], here=False)
    given = os.environ.get("COLLBENCH_GPU_SWEEP")
    if given:
        return _read(given, target)
    out = tmp_path_factory.mktemp("gpu") / "results"
    dtypes = ",".join(dict.fromkeys(("float32", "bfloat16", "int8", *target.float8)))
    sizes = ["-b", "1K", "-e", "256M", "-f", "16", "-n", "10", "-w", "3"] if target.gpu else \
        ["-b", "1K", "-e", "64K", "-f", "8", "-n", "3", "-w", "1"]
    proc = run_cli(["run", *target.run_args(), "--collectives", "all", "--dtypes", dtypes, "--op", ",".join(OPS),
                    *sizes, "-c", "1", "--patterns", "intra", "--output", str(out)], timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return _read(str(out), target)


def test_every_rank_measured_exactly(sweep):
    df, manifest, target = sweep.rows, sweep.manifest, sweep.target
    if sweep.here:  # the sweep asked for every collective the registry declares (gpu_check.py: --collectives all)
        assert set(json.loads(manifest["spec"])["collectives"]) == set(COLLECTIVES)
    n = int(df.world_size.max())
    if target.gpu:
        assert n == target.ranks  # the intra pattern's largest group holds every GPU
    assert (df.status == "ok").all() and (df.n_wrong == 0).all()
    assert set(df.backend) == {target.backend}
    # every group the intra pattern forms on n ranks, each on distinct devices, every GPU used
    sizes = intra_group_sizes(n)
    assert sorted(set(df.world_size)) == sizes
    for size in sizes:
        assert df[df.world_size == size].group_id.nunique() == n // size, size
        # every collective the run planned for this size (send_recv needs two ranks), none more
        assert set(df[df.world_size == size].collective) == planned(manifest, size), size
    if target.gpu:
        assert all(len(set(ds)) == len(ds) for ds in df.devices)
        assert {d for ds in df.devices for d in ds} == {f"cuda:{i}" for i in range(n)}
    else:
        assert {d for ds in df.devices for d in ds} == {"cpu"}
    assert (df.time_us > 0).all() and (df.time_us_batch > 0).all()
    if target.gpu:
        # each size's GPU memory, measured on the device, within what the memory checks estimate
        over = df[df.mem_peak_bytes > df.mem_estimate_bytes + (2 << 20)]
        assert df.mem_peak_bytes.notna().all() and over.empty, \
            over[["collective", "dtype", "msg_bytes", "mem_peak_bytes", "mem_estimate_bytes"]]
    else:  # no device allocator to read on the CPU: neither a peak nor an estimate is recorded
        assert df.mem_peak_bytes.isna().all() and df.mem_estimate_bytes.isna().all()
    assert (df[df.world_size >= 2].busbw_gbps > 0).all()


def test_transport_columns_come_from_nccls_log(sweep):
    df, target = sweep.rows, sweep.target
    if not target.gpu:
        # gloo writes no NCCL log: NCCL's columns are empty, none invented; the transport is gloo's own
        # device (TCP over the interface it bound), whatever the group's shape
        assert df.nccl_version.isna().all() and df.intra_transport.isna().all() and df.gpu_model.isna().all()
        assert df.net_transport.str.fullmatch(r"gloo/tcp/\S+").all(), df.net_transport.unique()
        return
    assert set(df.gpu_model) == {target.gpu_name}
    # the loaded library's banner on every row: also the second and later groups of each worker,
    # whose own log lines have no banner (NCCL prints it once per process)
    assert df.nccl_version.notna().all(), df[df.nccl_version.isna()][["group_id", "world_size"]].drop_duplicates()
    versions = set(df.nccl_version)
    assert len(versions) == 1 and versions.pop().count(".") == 2
    multi = df[df.world_size >= 2]
    assert multi.intra_transport.notna().all(), multi.intra_transport.unique()
    assert df[df.world_size == 1].intra_transport.isna().all()  # one rank: NCCL connects no peer
    assert df.net_transport.isna().all()  # one node: nothing crossed a network


def _one_rank_group(target: Target):
    import torch.distributed as dist

    device = torch.device("cuda", 0) if target.gpu else torch.device("cpu")
    dist.init_process_group(target.backend, store=dist.TCPStore("127.0.0.1", 0, 1, True), rank=0, world_size=1,
                            **({"device_id": device} if target.gpu else {}))
    return device


@pytest.mark.parametrize(("coll", "op", "in_place"), [("all_reduce", "sum", True), ("all_gather", "none", False)])
def test_a_large_case_is_exact_and_its_estimate_covers_its_buffers(target, coll, op, in_place):
    """The harness on one rank at 1 GiB (the CPU form: 16 MiB): exact, and the memory checks'
    estimate (sweep.devices.case_bytes) at least the bytes of the buffers it names."""
    import torch.distributed as dist

    from orchestrator.sweep.devices import case_bytes
    from workloads import registry
    from workloads.harness import run_case
    from workloads.messages import Case
    from workloads.registry import Ctx

    count = 1 << 28 if target.gpu else 1 << 22
    device = _one_rank_group(target)
    try:
        case = Case(coll, "float32", op, in_place, (count,), 3, 1, 1)
        (sample,) = run_case(case, 0, 1, device)
        assert sample.error is None and sample.n_wrong == 0 and len(sample.iter_time_us) == 3
        buffers = registry.get(coll).buffer_numel(Ctx(0, 1, count, "float32", op, 0, in_place)) * 4
        assert buffers == (1 if in_place else 2) * count * 4
        assert case_bytes(case, 1, target.backend) >= buffers
    finally:
        dist.destroy_process_group()


def test_memory_estimate_matches_the_device_peak(target):
    """Peak allocated bytes on the GPU at 1 GiB against sweep.devices.case_bytes."""
    if not target.gpu:
        pytest.skip(target.cpu_form("torch keeps no allocator peak for CPU memory, so there is no device peak "
                                    "to compare the estimate with"))
    import torch.distributed as dist

    from orchestrator.sweep.devices import case_bytes
    from workloads.harness import run_case
    from workloads.messages import Case

    device = _one_rank_group(target)
    try:
        for coll, op, in_place in (("all_reduce", "sum", True), ("all_gather", "none", False)):
            case = Case(coll, "float32", op, in_place, (1 << 28,), 3, 1, 1)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            (sample,) = run_case(case, 0, 1, device)
            peak = torch.cuda.max_memory_allocated() - base
            estimate = case_bytes(case, 1, "nccl")
            assert sample.n_wrong == 0
            assert 0.9 * estimate <= peak <= 1.05 * estimate + (16 << 20), (coll, peak, estimate)
    finally:
        dist.destroy_process_group()


def test_float8_runs_on_hopper_and_is_refused_elsewhere(sweep, tmp_path):
    """The sweep's own float8 rows (the CPU form: its stand-ins) for every collective it planned:
    the fill and the check use only what CUDA has for float8 (tests/unit/test_float8_ops.py), and
    NCCL moves and reduces them. Where float8 cannot run, naming it is refused with the reason."""
    df, manifest, target = sweep.rows, sweep.manifest, sweep.target
    if target.float8:
        rows = df[df.dtype.isin(target.float8)]
        assert set(rows.dtype) == set(target.float8)
        assert (rows.status == "ok").all() and (rows.n_wrong == 0).all()
        for size in sorted(set(df.world_size)):
            assert set(rows[rows.world_size == size].collective) == planned(manifest, size), size
        spec_ops = set(json.loads(manifest["spec"])["ops"])
        assert set(rows[rows.collective.isin(["all_reduce", "reduce_scatter", "reduce"])].op) == spec_ops
    if target.float8_capable or not sweep.here:
        return  # measured above, in the sweep
    refused = run_cli(["run", *target.run_args(), "--dtypes", "float8_e4m3,float8_e5m2", "-b", "1K", "-e", "1K",
                       "--patterns", "intra", "--output", str(tmp_path / "r")], timeout=120)
    assert refused.returncode == 2 and not (tmp_path / "r").exists(), refused.stderr[-2000:]
    reason = "float8 reductions need 9.0 or newer" if target.gpu else \
        "float8_e4m3 is not supported by backend gloo"
    assert reason in refused.stderr


def test_overlap_matmul_is_sized_to_the_collective(target, tmp_path):
    if target.gpu and target.ranks < 2:
        pytest.skip(f"overlap {ONE_RANK}")
    sizes = ["-b", "64M", "-e", "256M", "-f", "4", "-n", "10"] if target.gpu else \
        ["-b", "1M", "-e", "4M", "-f", "4", "-n", "5"]
    proc = run_cli(["run", *target.run_args(ranks=2), "--collectives", "overlap", *sizes, "--patterns", "intra",
                    "--output", str(tmp_path / "r")], timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ov = pd.read_parquet(tmp_path / "r")
    assert set(ov.collective) == {"overlap"} and (ov.status == "ok").all() and (ov.n_wrong == 0).all()
    ratio = ov.t_comp_us / ov.t_comm_us
    # not a launch-overhead-sized matmul (that reads ~0.001); on the CPU the collective's own time moves
    # 30-90% from one run to the next on this host (3.39 seen once), so the CPU form's band is wider
    low, high = (0.3, 3.0) if target.gpu else (0.2, 5.0)
    assert ratio.between(low, high).all(), ratio.tolist()
