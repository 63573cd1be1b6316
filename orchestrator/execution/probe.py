"""One short Ray task per node, before any actor: what its GPUs are (`nvidia-smi`; when float8
is asked for, the NCCL version its torch was built with) and what platform it is (sweep.platform:
its NICs in /sys, its instance type, what a lab declares). No CUDA context is made."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from orchestrator.errors import first_line
from orchestrator.sweep.devices import DeviceCaps
from orchestrator.sweep.inventory import Inventory
from orchestrator.sweep.platform import Platform, detect

_QUERY = "name,memory.total,compute_cap,driver_version"


def parse_nvidia_smi(text: str) -> DeviceCaps:
    """`nvidia-smi --query-gpu=name,memory.total,compute_cap,driver_version --format=csv,noheader,nounits`
    output (one line per GPU) -> the node's smallest memory and oldest compute capability."""
    rows = [[f.strip() for f in line.split(",")] for line in text.strip().splitlines() if line.strip()]
    if not rows or any(len(r) != 4 for r in rows):
        return DeviceCaps(problem=f"unexpected nvidia-smi output: {text.strip()[:80]!r}")
    caps = [tuple(int(x) for x in r[2].split(".")) for r in rows]
    return DeviceCaps(gpu_name=rows[0][0], memory_bytes=min(int(r[1]) for r in rows) << 20,
                      compute_capability=min(caps), driver_version=rows[0][3], gpus=len(rows))


@dataclass(frozen=True)
class NodeProbe:
    caps: DeviceCaps | None  # None on a node without GPUs
    platform: Platform


def _read_node(with_nccl: bool, gpus: bool) -> NodeProbe:
    caps = _read_gpus(with_nccl) if gpus else None
    names = [caps.gpu_name] * caps.gpus if caps and caps.gpu_name else None
    return NodeProbe(caps, detect(nvidia_smi_names=names))


def _read_gpus(with_nccl: bool) -> DeviceCaps:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={_QUERY}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return DeviceCaps(problem=f"nvidia-smi: {first_line(e)}")
    caps = parse_nvidia_smi(out)
    if with_nccl and caps.problem is None:
        try:
            import torch

            version = tuple(int(x) for x in torch.cuda.nccl.version()[:3])
        except Exception as e:  # a torch without CUDA: say so, do not guess
            return DeviceCaps(**{**caps.__dict__, "problem": f"torch NCCL version: {first_line(e)}"})
        caps = DeviceCaps(**{**caps.__dict__, "nccl_version": version})
    return caps


def probe_nodes(inv: Inventory, with_nccl: bool, timeout_s: float = 120.0) -> dict[str, NodeProbe]:
    """What every node of the inventory is, read on all of them at once."""
    task = ray.remote(num_cpus=0)(_read_node)
    refs = {
        node.node_id: task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False))
        .remote(with_nccl, node.gpus > 0)
        for node in inv.nodes
    }
    out = {}
    for node, ref in zip(inv.nodes, refs.values()):
        try:
            out[node.node_id] = ray.get(ref, timeout=timeout_s)
        except Exception as e:
            problem = f"probe task: {first_line(e)}"
            out[node.node_id] = NodeProbe(DeviceCaps(problem=problem) if node.gpus else None, Platform(("unknown",)))
    return out
