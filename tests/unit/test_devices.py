"""Device checks before a run, on injected capabilities (what nvidia-smi and torch would say)."""

import pytest

from orchestrator.errors import UsageError
from orchestrator.execution.probe import parse_nvidia_smi
from orchestrator.sweep.devices import GPU_RESERVE_BYTES, DeviceCaps, bytes_per_rank, check_float8, check_memory
from orchestrator.sweep.inventory import from_description
from orchestrator.sweep.spec import SweepSpec
from workloads.data import CHECK_CHUNK

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
    with pytest.raises(UsageError, match=r"could not read node .*'s \(nvidia-smi: No such file"):
        check_float8(spec, "nccl", INV, dict.fromkeys(IDS, DeviceCaps(problem="nvidia-smi: No such file")))


def test_memory_estimate_is_buffers_plus_check_scratch():
    gib = 1 << 30
    # all_reduce in place: one buffer; the check compares a chunk at a time with a mask byte each
    spec = SweepSpec(collectives=("all_reduce",), min_bytes=gib, max_bytes=gib)
    assert bytes_per_rank(spec, [2, 8], "nccl") == gib + CHECK_CHUNK
    # send_recv out of place: two buffers; gloo's all_gather also makes a temporary of the output
    assert bytes_per_rank(SweepSpec(collectives=("send_recv",), min_bytes=gib, max_bytes=gib), [2], "nccl") == \
        2 * gib + CHECK_CHUNK
    ag = SweepSpec(collectives=("all_gather",), min_bytes=gib, max_bytes=gib, check_iters=0)
    assert bytes_per_rank(ag, [4], "nccl") == gib + gib // 4
    assert bytes_per_rank(ag, [4], "gloo") == 2 * gib + gib // 4


def test_memory_check_refuses_what_cannot_fit():
    caps = dict.fromkeys(IDS, H100)
    check_memory(SweepSpec(max_bytes=8 << 30), "nccl", INV, [2, 8], caps)  # 16G + scratch of 79G
    with pytest.raises(UsageError) as e:
        check_memory(SweepSpec(min_bytes=40 << 30, max_bytes=40 << 30), "nccl", INV, [2, 8], caps)  # send_recv: 80G
    have = (81559 << 20) - GPU_RESERVE_BYTES
    assert str(e.value).startswith("--max-bytes 40G: each rank needs about 80.0G (buffers and check), node ")
    assert f"has {have / (1 << 30):.1f}G of GPU memory per device" in str(e.value)
    check_memory(SweepSpec(min_bytes=40 << 30, max_bytes=40 << 30), "nccl", INV, [2], {})  # unknown memory: not refused
