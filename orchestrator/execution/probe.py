"""One short Ray task per node, before any actor: what its GPUs are (`nvidia-smi`), what torch on
the node makes of them (the CUDA it is built for, how many GPUs it sees, its error when it cannot use
them, the NCCL it is built with), and what platform it is (sweep.platform: its NICs in /sys, its
instance type, what a lab declares), and the NVLink domain its GPUs share with other nodes
(`nvidia-smi -q`'s Fabric sections, sweep.fabric). torch is asked in a subprocess, so whatever it
initialises (and a CUDA_VISIBLE_DEVICES Ray may have emptied for a task without GPUs) ends with it.

For tests only: where $COLLBENCH_TEST_NVIDIA_SMI_Q_DIR names a folder, a GPU node's domain is read
from the recorded `nvidia-smi -q` output `<that folder>/<the node's Ray id>.txt` instead of
nvidia-smi (a fake-GPU Ray cluster has no nvidia-smi); nothing else reads it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, replace

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from orchestrator.errors import first_line
from orchestrator.sweep.devices import DeviceCaps, parse_version
from orchestrator.sweep.fabric import node_domain, parse_fabric
from orchestrator.sweep.inventory import Inventory
from orchestrator.sweep.platform import Platform, detect

_QUERY = "name,memory.total,compute_cap,driver_version"
RECORDED_SMI_Q_DIR = "COLLBENCH_TEST_NVIDIA_SMI_Q_DIR"  # tests only: see the module's docstring


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
    nvlink_domain: str | None = None  # the NVLink domain every GPU of the node is in (sweep.fabric), else None


def _read_node(with_nccl: bool, gpus: bool) -> NodeProbe:
    caps = _read_gpus(with_nccl) if gpus else None
    names = [caps.gpu_name] * caps.gpus if caps and caps.gpu_name else None
    return NodeProbe(caps, detect(nvidia_smi_names=names), read_domain() if gpus else None)


def read_domain(timeout_s: float = 30.0) -> str | None:
    """The node's NVLink domain from `nvidia-smi -q` (within `timeout_s`: it walks every GPU, slow
    on an NVL72 tray); None where nvidia-smi fails or shows none: a domain is a fact, never a guess."""
    recorded = os.environ.get(RECORDED_SMI_Q_DIR)
    try:
        if recorded:
            with open(os.path.join(recorded, f"{ray.get_runtime_context().get_node_id()}.txt")) as f:
                text = f.read()
        else:
            text = subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True, timeout=timeout_s,
                                  check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return node_domain(parse_fabric(text))


def _read_gpus(with_nccl: bool) -> DeviceCaps:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={_QUERY}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        caps = parse_nvidia_smi(out)
    except (OSError, subprocess.SubprocessError) as e:
        caps = DeviceCaps(problem=f"nvidia-smi: {first_line(e)}")
    caps = with_torch(caps, _ask_torch())
    if with_nccl and caps.problem is None and caps.nccl_version is None:
        caps = replace(caps, problem=f"torch NCCL version: {caps.torch_problem or 'torch is not built with NCCL'}")
    return caps


# Run by the node's Python: torch's view of the node's GPUs, as one JSON line.
_TORCH_REPORT = """
import json, torch
out = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpus": None, "error": None, "nccl": None}
try:
    torch.cuda.init()
    out["gpus"] = torch.cuda.device_count()
except Exception as e:
    out["error"] = ([ln.strip() for ln in str(e).splitlines() if ln.strip()] or [type(e).__name__])[0][:300]
try:
    out["nccl"] = list(torch.cuda.nccl.version())[:3] if torch.version.cuda else None
except Exception:
    pass
try:  # the libnccl this process loaded with torch (not linked in statically), asked for its version
    import ctypes
    lib = next((ln.split()[-1] for ln in open("/proc/self/maps") if "/libnccl" in ln), None)
    code = ctypes.c_int()
    if lib and ctypes.CDLL(lib).ncclGetVersion(ctypes.byref(code)) == 0:
        out["nccl_loaded"] = code.value
except Exception:
    pass
print(json.dumps(out))
"""


def nccl_version_code(code: int) -> tuple[int, int, int]:
    """NCCL_VERSION_CODE as ncclGetVersion gives it -> (major, minor, patch): X*10000 + Y*100 + Z
    from 2.9 on, X*1000 + Y*100 + Z before (nccl.h, NCCL_VERSION)."""
    if code >= 10000:
        return code // 10000, code // 100 % 100, code % 100
    return code // 1000, code // 100 % 10, code % 100


def _ask_torch(timeout_s: float = 90.0) -> str:
    env = dict(os.environ)
    if env.get("CUDA_VISIBLE_DEVICES") == "":  # Ray's mask for a task without GPUs: the node's GPUs are meant
        del env["CUDA_VISIBLE_DEVICES"]
    try:
        done = subprocess.run([sys.executable, "-c", _TORCH_REPORT], capture_output=True, text=True, check=False,
                              timeout=timeout_s, env=env)
    except (OSError, subprocess.SubprocessError) as e:
        return json.dumps({"error": f"torch probe: {first_line(e)}"})
    if done.returncode != 0:
        lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
        return json.dumps({"error": f"torch probe exited {done.returncode}: {lines[-1] if lines else ''}"[:300]})
    return done.stdout


def with_torch(caps: DeviceCaps, report: str) -> DeviceCaps:
    """`caps` with what the torch report (the last JSON line of `_TORCH_REPORT`'s output) says."""
    lines = [ln for ln in report.strip().splitlines() if ln.startswith("{")]
    try:
        got = json.loads(lines[-1])
    except (IndexError, ValueError):
        return replace(caps, torch_problem=f"unreadable torch probe output: {report.strip()[:80]!r}")
    cuda = parse_version(got["cuda"])[:2] if got.get("cuda") else None
    nccl = tuple(got["nccl"]) if got.get("nccl") else caps.nccl_version
    loaded = nccl_version_code(got["nccl_loaded"]) if isinstance(got.get("nccl_loaded"), int) else None
    return replace(caps, torch_version=got.get("torch"), torch_cuda=cuda if cuda and len(cuda) == 2 else None,
                   torch_gpus=got.get("gpus"), torch_problem=got.get("error"), nccl_version=nccl,
                   nccl_loaded=loaded)


def probe_nodes(inv: Inventory, with_nccl: bool, timeout_s: float = 120.0) -> dict[str, NodeProbe]:
    """What every node of the inventory is, read on all of them at once."""
    return gather(inv, submit(inv, with_nccl), timeout_s)


def read_domains(inv: Inventory, timeout_s: float = 60.0) -> dict[str, str]:
    """Each GPU node's NVLink domain alone (node id -> domain, nodes without one left out), one
    small task per node: for `collbench plan` on a live cluster, which starts no probe of devices."""
    task = ray.remote(num_cpus=0)(read_domain)
    refs = {node.node_id: task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False))
            .remote() for node in inv.nodes if node.gpus}
    if not refs:
        return {}
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
    out = {}
    for node_id, ref in refs.items():
        try:
            domain = ray.get(ref, timeout=0) if ref in ready else None
        except Exception:  # a node whose task failed has no domain known: the plan says so, not a crash
            domain = None
        if domain:
            out[node_id] = domain
    return out


def submit(inv: Inventory, with_nccl: bool) -> dict[str, ray.ObjectRef]:
    """Start the probe task on every node; `gather` collects them."""
    task = ray.remote(num_cpus=0)(_read_node)
    return {
        node.node_id: task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False))
        .remote(with_nccl, node.gpus > 0)
        for node in inv.nodes
    }


def submit_in(inv: Inventory, actors: dict[str, object], with_nccl: bool) -> dict[str, ray.ObjectRef]:
    """The probe run in a worker already on each node (`actors`: node id -> one of its workers),
    through Ray's __ray_call__: a CPU-only run starts no process of its own for it (16 of them cost
    a 2-core host 6-8 s before the workers, and slowed the workers beside them)."""
    return {node_id: actor.__ray_call__.remote(_read_node_in, with_nccl, False) for node_id, actor in actors.items()}


def _read_node_in(worker, with_nccl: bool, gpus: bool) -> NodeProbe:
    return _read_node(with_nccl, gpus)


def gather(inv: Inventory, refs: dict[str, ray.ObjectRef], timeout_s: float = 120.0) -> dict[str, NodeProbe]:
    """Every node's probe, waited for together within `timeout_s`; a node whose task failed or did
    not answer is `unknown`, with the reason where its devices matter."""
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
    done = set(ready)
    out = {}
    for node in inv.nodes:
        ref = refs[node.node_id]
        try:
            if ref not in done:
                raise TimeoutError(f"no answer within {timeout_s:.0f}s")
            out[node.node_id] = ray.get(ref, timeout=0)
        except Exception as e:
            problem = f"probe task: {first_line(e)}"
            out[node.node_id] = NodeProbe(DeviceCaps(problem=problem) if node.gpus else None, Platform(("unknown",)))
    return out
