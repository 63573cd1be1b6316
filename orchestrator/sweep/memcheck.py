"""Refuse message sizes that cannot fit, before any actor starts.

A rank holds its send and receive buffers (up to 2 x msg_bytes) and, while checking, the exact
reference built from int64 integers (about 3 x 8 bytes per element at the peak). Host memory comes
from Ray's view of each node; GPU memory from one short task per GPU node (`nvidia-smi`), and the
check is skipped where that cannot be read.
"""

from __future__ import annotations

import subprocess

from orchestrator.errors import UsageError
from orchestrator.sweep.inventory import Inventory
from orchestrator.sweep.sizes import format_bytes
from orchestrator.sweep.spec import SweepSpec
from workloads.dtypes import ELEMENT_BYTES


def bytes_per_rank(spec: SweepSpec) -> int:
    worst = 0
    for dtype in spec.dtypes:
        count = spec.max_bytes // ELEMENT_BYTES[dtype]
        worst = max(worst, 2 * spec.max_bytes + (3 * 8 * count if spec.check_iters else 0))
    return worst


def check_memory(spec: SweepSpec, inv: Inventory, gpu_memory: dict[str, int]) -> None:
    need = bytes_per_rank(spec)
    for node in inv.nodes:
        if inv.use_gpus:
            have, what = gpu_memory.get(node.node_id, 0), "GPU memory per device"
            per_rank = have
        else:
            have, what = node.memory_bytes, f"memory for {node.ranks} ranks"
            per_rank = have // max(node.ranks, 1)
        if have and need > per_rank:
            raise UsageError(
                f"--max-bytes {format_bytes(spec.max_bytes)}: each rank needs about {format_bytes(need)} "
                f"(buffers and check), node {node.ip} has {format_bytes(have)} of {what}"
            )


def _gpu_memory_here() -> int:
    """Smallest total memory of this machine's GPUs, in bytes (0 when unknown)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
        return min(int(v) for v in out.split()) << 20
    except (OSError, subprocess.SubprocessError, ValueError):
        return 0


def probe_gpu_memory(inv: Inventory, timeout_s: float = 60.0) -> dict[str, int]:
    """GPU memory per node id, read by one short task per GPU node (no actor, no CUDA)."""
    if not inv.use_gpus:
        return {}
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = ray.remote(num_cpus=0)(_gpu_memory_here)
    refs = {
        node.node_id: probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False)).remote()
        for node in inv.nodes
    }
    out = {}
    for node_id, ref in refs.items():
        try:
            out[node_id] = ray.get(ref, timeout=timeout_s)
        except Exception:  # unknown: the check is skipped for that node
            out[node_id] = 0
    return out
