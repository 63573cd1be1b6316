"""Whether tests/gpu run on the GPUs, in their CPU form, or fail on this machine: `decide` is pure
(tests/unit/test_gpu_gate.py gives it injected facts); `read_facts` reads them here. `Target` says
what the tests then run on; `planned` what a run's rows must hold, from the declarations the sweep
reads (the manifest's spec and the registry), never a hand copy.

Where this machine has no NVIDIA GPU at all, the tests run their CPU form (gloo on CPU ranks, each
CUDA-only part swapped for its stand-in and named), so that what they assert about sets, columns,
JSON and commands runs in CI and fails there when the code drifts. Where a GPU is there (nvidia-smi
lists one, or the kernel driver made /dev/nvidiaN) and torch cannot use CUDA, every GPU test fails
with the reason: a driver older than torch's CUDA needs (sweep.devices.driver_problem, the run's own
check), a CPU-only torch, CUDA_VISIBLE_DEVICES hiding the GPUs, or torch's own error. So
scripts/gpu_check.sh cannot pass on a machine whose driver is too old. With COLLBENCH_REQUIRE_GPU=1
(gpu_check.sh sets it) a machine without a GPU fails too: a GPU check that measured nothing did not pass.
"""

from __future__ import annotations

import enum
import glob
import json
import os
import re
import subprocess
from dataclasses import dataclass

from orchestrator.sweep.devices import FLOAT8, FLOAT8_MIN_CC, DeviceCaps, driver_problem, parse_version
from workloads import registry

_QUERY = "name,memory.total,compute_cap,driver_version"


class Gate(enum.Enum):
    RUN = "run"  # on the GPUs, over NCCL
    CPU = "cpu"  # no NVIDIA GPU here: the CPU form (gloo, CPU tensors)
    FAIL = "fail"


@dataclass(frozen=True)
class Facts:
    """What this machine says about its GPUs, from nvidia-smi, /dev and torch."""

    smi_output: str | None  # `nvidia-smi --query-gpu=...` (a CSV line per GPU); None: not installed
    smi_error: str | None = None  # nvidia-smi ran and failed: its message
    device_files: int = 0  # /dev/nvidia0, /dev/nvidia1, ...: GPUs the kernel driver gave this machine
    torch_version: str = ""
    torch_cuda: str | None = None  # the CUDA torch is built for; None: a CPU-only build
    cuda_available: bool = False  # torch.cuda.is_available()
    torch_gpus: int = 0  # torch.cuda.device_count() when available
    torch_error: str | None = None  # torch.cuda.init()'s error when CUDA is not available
    visible_devices: str | None = None  # CUDA_VISIBLE_DEVICES, when set
    require_gpu: bool = False  # COLLBENCH_REQUIRE_GPU=1


def decide(f: Facts) -> tuple[Gate, str]:
    """RUN, SKIP or FAIL for this machine, and the reason (one line)."""
    smi = _smi_caps(f.smi_output)
    if f.cuda_available and f.torch_gpus > 0:
        where = f"{smi.gpus} x {smi.gpu_name}, driver {smi.driver_version}" if smi.gpus else "nvidia-smi lists none"
        return Gate.RUN, f"torch {f.torch_version} (CUDA {f.torch_cuda}) uses {f.torch_gpus} GPU(s) ({where})"
    if not smi.gpus and not f.device_files:
        why = ("nvidia-smi is not installed" if f.smi_output is None and f.smi_error is None
               else f"nvidia-smi: {f.smi_error or 'lists no GPU'}")
        reason = f"no NVIDIA GPU on this machine ({why}; no /dev/nvidiaN)"
        if f.require_gpu:
            return Gate.FAIL, reason + " and COLLBENCH_REQUIRE_GPU=1: the GPU check has nothing to measure"
        return Gate.CPU, reason + ": the CPU form runs (gloo on CPU ranks)"
    seen = (f"nvidia-smi lists {smi.gpus} x {smi.gpu_name} (driver {smi.driver_version})" if smi.gpus else
            f"/dev has {f.device_files} NVIDIA device(s) but nvidia-smi "
            + (f"failed: {f.smi_error}" if f.smi_error else "is not installed"))
    return Gate.FAIL, f"{seen} but torch {f.torch_version} cannot use CUDA: {_why_not(f, smi)}"


def _why_not(f: Facts, smi: DeviceCaps) -> str:
    # CUDA reads the list up to its first invalid entry: an empty or invalid first entry hides all
    first = (f.visible_devices or "").split(",")[0].strip()
    if f.visible_devices is not None and not (first.isdigit() or first.startswith(("GPU-", "MIG-"))):
        return f"CUDA_VISIBLE_DEVICES={f.visible_devices!r} hides every GPU"
    if f.torch_cuda is None:
        return "it is a CPU-only build (torch.version.cuda is None): install a torch built for CUDA"
    cuda = parse_version(f.torch_cuda)[:2] if f.torch_cuda else None
    caps = DeviceCaps(driver_version=smi.driver_version, torch_version=f.torch_version,
                      torch_cuda=cuda if cuda and len(cuda) == 2 else None, torch_gpus=f.torch_gpus,
                      torch_problem=f.torch_error)
    problem = driver_problem(caps, smi.gpus or f.device_files)
    if problem:
        return "this machine " + problem
    return f.torch_error or "torch.cuda.is_available() is False and torch gives no reason"


def _smi_caps(output: str | None) -> DeviceCaps:
    """nvidia-smi's GPUs (gpus = 0 when it listed none or could not be read)."""
    from orchestrator.execution.probe import parse_nvidia_smi

    if not output or not output.strip():
        return DeviceCaps()
    caps = parse_nvidia_smi(output)
    return caps if caps.problem is None else DeviceCaps()


def intra_group_sizes(n: int) -> list[int]:
    """What the GPU tests expect of the intra pattern on one node of n GPUs: groups of 2, 4, 8, ...
    below n, then n; one group of one GPU on a one-GPU machine (orchestrator/sweep/planner.py)."""
    sizes = [2 << k for k in range(max(n - 1, 0).bit_length()) if 2 << k < n]
    return [*sizes, n] if n >= 2 else [1]


# The CPU form's stand-ins for float8, which gloo refuses ("Invalid scalar type"): the two small
# floats it moves; its own sweep's ranks: two, so that the multi-rank expectations run in CI (one
# rank's are run on the recorded H200 rows)
CPU_FLOAT8_STAND_INS = ("float16", "bfloat16")
CPU_RANKS = 2


@dataclass(frozen=True)
class Target:
    """What tests/gpu run on: every GPU of this machine over NCCL, or their CPU form (gloo on CPU
    ranks, with the CUDA-only parts swapped for stand-ins that `cpu_form` names)."""

    gpu: bool
    reason: str  # the gate's
    ranks: int = CPU_RANKS  # GPUs torch sees, or the CPU form's ranks for a sweep of its own
    float8_capable: bool = False  # compute capability 9.0 or newer on every GPU
    gpu_name: str | None = None  # torch.cuda.get_device_name

    @property
    def backend(self) -> str:
        return "nccl" if self.gpu else "gloo"

    def run_args(self, ranks: int | None = None) -> list[str]:
        """`collbench run` options that put a run on this target (`ranks`: the CPU form's)."""
        if self.gpu:
            return ["--backend", "nccl"]
        return ["--backend", "gloo", "--ranks-per-node", str(ranks or self.ranks)]

    @property
    def float8(self) -> tuple[str, ...]:
        """The dtypes the float8 test reads: float8 where the GPUs reduce it; the CPU form's stand-ins
        (nothing on a GPU older than 9.0, where float8 is refused)."""
        if not self.gpu:
            return CPU_FLOAT8_STAND_INS
        return tuple(sorted(FLOAT8)) if self.float8_capable else ()

    def cpu_form(self, what: str) -> str:
        """The line a CUDA-only check gives where the CPU form cannot make it."""
        return f"CPU form (no NVIDIA GPU here): {what}"


def target_of(gate: Gate, reason: str) -> Target:
    """The target for a RUN or CPU decision (torch is imported only for RUN)."""
    if gate is Gate.CPU:
        return Target(gpu=False, reason=reason)
    import torch

    n = torch.cuda.device_count()
    capable = min(torch.cuda.get_device_capability(i) for i in range(n)) >= FLOAT8_MIN_CC
    return Target(gpu=True, reason=reason, ranks=n, float8_capable=capable, gpu_name=torch.cuda.get_device_name(0))


# A GPU run recorded by the GPU check (its rows and manifest: tests/fixtures/gpu/*/SOURCE.md), and
# the target it ran on: the GPU form's assertions on those rows run everywhere, CI included.
RECORDED = {
    "h200_20261204": Target(gpu=True, reason="recorded: scripts/gpu_check.sh on one H200, 2026-12-04", ranks=1,
                            float8_capable=True, gpu_name="NVIDIA H200"),
}


def planned(manifest: dict, world_size: int) -> set[str]:
    """The collectives a run planned for groups of `world_size`: its spec's (as the manifest saved
    what the sweep read) that the registry lets run on that many ranks (send_recv needs two)."""
    spec = json.loads(manifest["spec"])
    return {name for name in spec["collectives"] if registry.collective_of(name).min_ranks <= world_size}


def read_facts() -> Facts:
    """This machine's facts (nvidia-smi, /dev, torch in this process)."""
    import torch

    smi_output = smi_error = None
    try:
        done = subprocess.run(["nvidia-smi", f"--query-gpu={_QUERY}", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=60, check=False)
        if done.returncode == 0:
            smi_output = done.stdout
        else:
            lines = [ln.strip() for ln in (done.stdout + "\n" + done.stderr).splitlines() if ln.strip()]
            smi_error = f"exit {done.returncode}: {lines[0] if lines else ''}"
            smi_output = ""
    except FileNotFoundError:
        pass
    except (OSError, subprocess.SubprocessError) as e:
        smi_error, smi_output = f"{type(e).__name__}: {e}", ""
    available = torch.cuda.is_available()
    torch_error = None
    if not available:
        try:
            torch.cuda.init()
        except Exception as e:  # noqa: BLE001 - whatever torch raises is the reason we report
            torch_error = ([ln.strip() for ln in str(e).splitlines() if ln.strip()] or [type(e).__name__])[0][:300]
    return Facts(
        smi_output=smi_output, smi_error=smi_error,
        device_files=len([p for p in glob.glob("/dev/nvidia*") if re.fullmatch(r"/dev/nvidia\d+", p)]),
        torch_version=torch.__version__, torch_cuda=torch.version.cuda, cuda_available=available,
        torch_gpus=torch.cuda.device_count() if available else 0, torch_error=torch_error,
        visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        require_gpu=os.environ.get("COLLBENCH_REQUIRE_GPU") == "1",
    )
