"""Device checks before a run, on injected capabilities (what nvidia-smi and torch would say)."""

import pytest

from orchestrator.errors import UsageError
from orchestrator.execution.probe import parse_nvidia_smi
from orchestrator.sweep.devices import (
    DeviceCaps,
    bytes_per_rank,
    check_float8,
    check_memory,
    float8_for_cluster,
    gpu_reserve_bytes,
)
from orchestrator.sweep.inventory import from_description
from orchestrator.sweep.spec import SweepSpec
from workloads.memory import check_scratch_bytes

H100_SMI = "\n".join(["NVIDIA H100 80GB HBM3, 81559, 9.0, 550.54.15"] * 8) + "\n"
MIXED_SMI = "NVIDIA A100-SXM4-80GB, 81920, 8.0, 535.104.05\nNVIDIA A100-SXM4-40GB, 40960, 8.0, 535.104.05\n"
H100 = DeviceCaps("NVIDIA H100 80GB HBM3", 81559 << 20, (9, 0), "550.54.15", (2, 26, 2))
A100 = DeviceCaps("NVIDIA A100-SXM4-80GB", 81920 << 20, (8, 0), "535.104.05", (2, 26, 2))
INV = from_description("2x8")
IDS = [n.node_id for n in INV.nodes]


def test_nvidia_smi_is_read_per_node():
    caps = parse_nvidia_smi(H100_SMI)
    assert caps == DeviceCaps("NVIDIA H100 80GB HBM3", 81559 << 20, (9, 0), "550.54.15", gpus=8)
    mixed = parse_nvidia_smi(MIXED_SMI)
    assert mixed.memory_bytes == 40960 << 20 and mixed.compute_capability == (8, 0)  # the smallest GPU counts
    assert parse_nvidia_smi("No devices were found\n").problem.startswith("unexpected nvidia-smi output")


def test_float8_needs_hopper_and_nccl_2_24():
    spec = SweepSpec(dtypes=("bfloat16", "float8_e4m3"))
    check_float8(spec, "nccl", INV, dict.fromkeys(IDS, H100))  # fine
    check_float8(SweepSpec(dtypes=("bfloat16",)), "nccl", INV, {})  # no float8: nothing to check
    with pytest.raises(UsageError) as e:
        check_float8(spec, "nccl", INV, {IDS[0]: H100, IDS[1]: A100})
    assert str(e.value) == (f"--dtypes float8_e4m3: node {INV.nodes[1].ip}'s GPUs (NVIDIA A100-SXM4-80GB) have "
                            "compute capability 8.0; float8 reductions need 9.0 or newer (Hopper)")
    old = DeviceCaps(**{**H100.__dict__, "nccl_version": (2, 21, 5)})
    with pytest.raises(UsageError, match="built with NCCL 2.21.5; float8 reductions need NCCL 2.24 or newer"):
        check_float8(spec, "nccl", INV, dict.fromkeys(IDS, old))
    # built with 2.26, loading an older libnccl (one first on the library path): the loaded one decides
    stale = DeviceCaps(**{**H100.__dict__, "nccl_loaded": (2, 21, 5)})
    with pytest.raises(UsageError, match=r"loads NCCL 2\.21\.5 \(built with 2\.26\.2\); float8 reductions need"):
        check_float8(spec, "nccl", INV, dict.fromkeys(IDS, stale))
    check_float8(spec, "nccl", INV, dict.fromkeys(IDS, DeviceCaps(**{**H100.__dict__, "nccl_loaded": (2, 28, 9)})))
    with pytest.raises(UsageError, match=r"could not read node .*'s \(nvidia-smi: No such file"):
        check_float8(spec, "nccl", INV, dict.fromkeys(IDS, DeviceCaps(problem="nvidia-smi: No such file")))


def test_memory_estimate_is_buffers_plus_check_scratch():
    gib = 1 << 30
    # all_reduce in place: one buffer; the check compares a chunk at a time with a mask byte each,
    # and counts a chunk that mismatches (COUNT_CHUNK elements at 9 bytes each on CUDA)
    assert check_scratch_bytes() == (1 << 22) + (1 << 18) * 9
    spec = SweepSpec(collectives=("all_reduce",), min_bytes=gib, max_bytes=gib)
    assert bytes_per_rank(spec, [2, 8], "nccl") == gib + check_scratch_bytes()
    # send_recv out of place: two buffers; gloo's all_gather also makes a temporary of the output
    assert bytes_per_rank(SweepSpec(collectives=("send_recv",), min_bytes=gib, max_bytes=gib), [2], "nccl") == \
        2 * gib + check_scratch_bytes()
    ag = SweepSpec(collectives=("all_gather",), min_bytes=gib, max_bytes=gib, check_iters=0)
    assert bytes_per_rank(ag, [4], "nccl") == gib + gib // 4
    assert bytes_per_rank(ag, [4], "gloo") == 2 * gib + gib // 4


def test_memory_check_refuses_what_cannot_fit():
    caps = dict.fromkeys(IDS, H100)
    check_memory(SweepSpec(max_bytes=8 << 30), "nccl", INV, [2, 8], caps)  # 16G + scratch of 79G
    with pytest.raises(UsageError) as e:
        check_memory(SweepSpec(min_bytes=40 << 30, max_bytes=40 << 30), "nccl", INV, [2, 8], caps)  # send_recv: 80G
    have = (81559 << 20) - (3 << 30)  # Hopper: 1G of context and NCCL buffers, 2G of headroom (NVLS)
    assert gpu_reserve_bytes((9, 0)) == 3 << 30 and gpu_reserve_bytes((8, 0)) == (1 << 30) + (512 << 20)
    assert str(e.value).startswith("--max-bytes 40G: each rank needs about 80.0G (buffers and check), node ")
    assert f"has {have / (1 << 30):.1f}G of GPU memory per device after 3G for CUDA and NCCL" in str(e.value)
    # a size the harness would refuse on the device (its headroom) is refused here too, before the run
    near = (81559 << 20) - (2 << 30) - check_scratch_bytes()  # fits a 1G-only reserve, not the 3G one
    with pytest.raises(UsageError, match="each rank needs about"):
        check_memory(SweepSpec(collectives=("all_reduce",), min_bytes=near, max_bytes=near), "nccl", INV, [2], caps)
    check_memory(SweepSpec(min_bytes=40 << 30, max_bytes=40 << 30), "nccl", INV, [2], {})  # unknown memory: not refused


def test_float8_that_only_all_asked_for_is_left_out_where_the_gpus_cannot():
    """`-d all` on A100s: every dtype but float8, said in a note; float8 named is refused."""
    every = SweepSpec(dtypes=("float32", "bfloat16", "float8_e4m3", "float8_e5m2"))
    caps = {IDS[0]: H100, IDS[1]: A100}
    spec, note = float8_for_cluster(every, "nccl", INV, caps, from_all=True)
    assert spec.dtypes == ("float32", "bfloat16")
    assert note == (f"-d all: float8 left out (node {INV.nodes[1].ip}'s GPUs (NVIDIA A100-SXM4-80GB) have compute "
                    "capability 8.0; float8 reductions need 9.0 or newer (Hopper))")
    assert float8_for_cluster(every, "nccl", INV, dict.fromkeys(IDS, H100), from_all=True) == (every, None)
    with pytest.raises(UsageError, match="compute capability 8.0"):
        float8_for_cluster(every, "nccl", INV, caps, from_all=False)

