"""What each node's devices can hold and run, checked before any actor starts. Pure: the
capabilities come from `execution.probe` (or a test), the checks only compare.

Memory: a rank holds one size at a time: its send and receive buffers (one buffer in place), what
the backend allocates for the call (gloo's all_gather and reduce_scatter: one more) and, while
checking, at most `check_scratch_bytes` of temporaries (workloads.memory); the estimate is
that peak (`memory.peak_bytes`; tests/integration/test_memory.py measures it on CPU). GPUs also
need room for the CUDA context and NCCL's own buffers: here the reserve is a context and NCCL's
buffers (GPU_CONTEXT_BYTES) plus the headroom the harness keeps per GPU generation for what NCCL
connects on first use (workloads.memory.NCCL_HEADROOM_BYTES: 2 GiB from Hopper, NVLS buffers), so
a sweep that cannot fit at all is refused before it starts; on the device the harness checks each
size against the memory it measures free, less the same headroom, and fails just that size.
float8: NCCL reduces float8 only from 2.24 on, in a torch built against it, on compute
capability 9.0 (Hopper) or newer.
Driver: a torch wheel carries its own CUDA runtime; the node's NVIDIA driver must be at least the
minimum of that CUDA major release (minor-version compatibility), else every rank fails at its
first CUDA call. `check_driver` refuses the run before any actor starts.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass

from orchestrator.errors import UsageError
from orchestrator.sweep.inventory import Inventory
from orchestrator.sweep.planner import build_cases
from orchestrator.sweep.sizes import format_bytes
from orchestrator.sweep.spec import SweepSpec
from workloads import registry
from workloads.memory import headroom_bytes_for, peak_bytes
from workloads.messages import Case
from workloads.registry import Ctx

GPU_CONTEXT_BYTES = 1 << 30  # the CUDA context (~0.5 GiB on Hopper) and NCCL's channel buffers
FLOAT8_MIN_CC = (9, 0)
FLOAT8_MIN_NCCL = (2, 24, 0)
FLOAT8 = frozenset({"float8_e4m3", "float8_e5m2"})
# The lowest Linux x86_64 driver on which a CUDA major release runs at all (any minor of it, through
# minor-version compatibility): NVIDIA's CUDA Toolkit Release Notes, "CUDA Driver", table "CUDA Toolkit
# and Minimum Required Driver Version for CUDA Minor Version Compatibility", and
# docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html (13.x >= 580, 12.x >= 525,
# 11.x >= 450). The exact builds are the GA drivers of 13.0 and 12.0 and the 11.x note's 450.80.02.
CUDA_DRIVER_FLOOR: dict[int, str] = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}


@dataclass(frozen=True)
class DeviceCaps:
    """One GPU node's devices, as `nvidia-smi` (and torch, when asked) read them on that node.
    Fields are None where they could not be read; `problem` says why."""

    gpu_name: str | None = None
    memory_bytes: int | None = None  # the smallest GPU of the node
    compute_capability: tuple[int, int] | None = None  # the oldest GPU of the node
    driver_version: str | None = None
    nccl_version: tuple[int, int, int] | None = None  # the NCCL torch was built with (its headers)
    nccl_loaded: tuple[int, int, int] | None = None  # the libnccl it loads (None: linked in, or not read)
    problem: str | None = None
    gpus: int = 0
    # what torch on the node says (a subprocess of the probe): its version, the CUDA it is built for
    # (None: a CPU build), how many GPUs it sees, and its own error when it cannot use them
    torch_version: str | None = None
    torch_cuda: tuple[int, int] | None = None
    torch_gpus: int | None = None
    torch_problem: str | None = None


def parse_version(text: str) -> tuple[int, ...]:
    """'550.54.15' -> (550, 54, 15); the leading numeric parts only ('13.0' -> (13, 0))."""
    out = []
    for part in text.strip().split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits or digits != part:
            break
        out.append(int(digits))
    return tuple(out)


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def driver_problem(caps: DeviceCaps, ray_gpus: int) -> str | None:
    """Why torch on this node cannot drive the `ray_gpus` GPUs Ray counts there (a driver older than
    torch's CUDA needs, a CPU build, fewer GPUs seen), or None when it can or nothing says otherwise."""
    built = f"torch {caps.torch_version}"
    floor = CUDA_DRIVER_FLOOR.get(caps.torch_cuda[0]) if caps.torch_cuda else None
    # torch's own words when the driver is too old name the CUDA the driver supports, not its version
    seen = re.search(r"found version (\d+)", caps.torch_problem or "")
    too_old = parse_version(caps.driver_version) < parse_version(floor) if caps.driver_version and floor else bool(seen)
    if floor is not None and too_old:
        driver = (f"NVIDIA driver {caps.driver_version}" if caps.driver_version else
                  f"an NVIDIA driver for CUDA {int(seen.group(1)) // 1000}.{int(seen.group(1)) % 1000 // 10}")
        return (f"has {driver}; {built} is built for CUDA {_dotted(caps.torch_cuda)}, which needs driver "
                f"{floor} or newer (CUDA {caps.torch_cuda[0]}.x): upgrade the driver or install a torch "
                "built for the driver's CUDA (docs/deploy/cloud.md, GPU driver)")
    if caps.torch_problem:
        return f"has {ray_gpus} GPUs but torch cannot use them ({caps.torch_problem})"
    if caps.torch_version is not None and caps.torch_cuda is None:
        return f"has {ray_gpus} GPUs but {built} is a CPU-only build"
    if caps.torch_gpus is not None and caps.torch_gpus < ray_gpus:
        return f"has {ray_gpus} GPUs (Ray's count) but {built} sees {caps.torch_gpus}"
    return None


def case_bytes(case: Case, n: int, backend: str) -> int:
    """The harness' peak on one rank of n for the largest size of `case`."""
    coll = registry.collective_of(case.collective)
    c = Ctx(0, n, max(case.counts), case.dtype, case.op, case.root, case.in_place)
    return peak_bytes(coll, c, backend, case.check_iters > 0)


def bytes_per_rank(spec: SweepSpec, group_sizes: Iterable[int], backend: str) -> int:
    """The largest `case_bytes` of the sweep, over every group size planned."""
    return max((case_bytes(case, n, backend) for n in set(group_sizes) for case in build_cases(spec, n)), default=0)


def check_memory(spec: SweepSpec, backend: str, inv: Inventory, group_sizes: Iterable[int],
                 caps: dict[str, DeviceCaps]) -> None:
    need = bytes_per_rank(spec, group_sizes, backend)
    for node in inv.nodes:
        if inv.use_gpus:
            cap = caps.get(node.node_id, DeviceCaps())
            total = cap.memory_bytes or 0
            reserve = gpu_reserve_bytes(cap.compute_capability)
            have = max(total - reserve, 0)
            what = f"GPU memory per device after {format_bytes(reserve)} for CUDA and NCCL"
            if not total:
                continue  # unknown: nothing to compare with
        else:
            have, what = node.memory_bytes // max(node.ranks, 1), f"memory per rank ({node.ranks} ranks)"
            if not node.memory_bytes:
                continue
        if need > have:
            raise UsageError(
                f"--max-bytes {format_bytes(spec.max_bytes)}: each rank needs about {format_bytes(need)} "
                f"(buffers and check), node {node.ip} has {format_bytes(have)} of {what}"
            )


def gpu_reserve_bytes(cc: tuple[int, int] | None) -> int:
    """What a GPU of compute capability `cc` keeps besides a size's buffers (unknown: the newest's)."""
    return GPU_CONTEXT_BYTES + headroom_bytes_for(cc or (99, 0))


def check_driver(backend: str, inv: Inventory, caps: dict[str, DeviceCaps]) -> None:
    """Refuse an NCCL run on a node whose torch cannot use its GPUs, naming the node, the driver and
    the minimum (gloo measures host memory and needs no CUDA)."""
    if backend != "nccl":
        return
    for node in inv.nodes:
        problem = driver_problem(caps[node.node_id], node.gpus) if node.node_id in caps else None
        if problem:
            raise UsageError(f"node {node.ip} {problem}")


def check_float8(spec: SweepSpec, backend: str, inv: Inventory, caps: dict[str, DeviceCaps]) -> None:
    """Refuse float8 dtypes on a cluster whose GPUs or NCCL cannot reduce them."""
    problem = float8_problem(spec, backend, inv, caps)
    if problem:
        raise UsageError(problem)


def float8_for_cluster(spec: SweepSpec, backend: str, inv: Inventory, caps: dict[str, DeviceCaps],
                       from_all: bool) -> tuple[SweepSpec, str | None]:
    """The spec this cluster can run, and a note: float8 that only `-d all` asked for (`from_all`)
    is left out where the GPUs or NCCL cannot reduce it; float8 asked for by name is refused."""
    problem = float8_problem(spec, backend, inv, caps)
    if problem is None:
        return spec, None
    if not from_all:
        raise UsageError(problem)
    kept = tuple(d for d in spec.dtypes if d not in FLOAT8)
    return dataclasses.replace(spec, dtypes=kept), f"-d all: float8 left out ({problem.split(': ', 1)[1]})"


def float8_problem(spec: SweepSpec, backend: str, inv: Inventory, caps: dict[str, DeviceCaps]) -> str | None:
    """Why the sweep's float8 dtypes cannot run on this cluster, in one line; None when they can
    (or when it has none). NCCL's float8 support is fixed when torch is built (its
    NCCL_SUPPORTS_FP8, from the headers: `nccl_version`) and when it runs (the libnccl it loads,
    which may be another: `nccl_loaded`, an older one on the library path); both must have it."""
    wanted = [d for d in spec.dtypes if d in FLOAT8]
    if not wanted or backend != "nccl":
        return None
    flag = f"--dtypes {wanted[0]}"
    for node in inv.nodes:
        cap = caps.get(node.node_id, DeviceCaps(problem="not probed"))
        where = f"node {node.ip}"
        if cap.compute_capability is None or cap.nccl_version is None:
            return (f"{flag}: needs compute capability 9.0 and NCCL 2.24; could not read {where}'s "
                    f"({cap.problem or 'unknown'})")
        if cap.compute_capability < FLOAT8_MIN_CC:
            cc = ".".join(map(str, cap.compute_capability))
            return (f"{flag}: {where}'s GPUs ({cap.gpu_name}) have compute capability {cc}; float8 "
                    "reductions need 9.0 or newer (Hopper)")
        if cap.nccl_version < FLOAT8_MIN_NCCL:
            version = ".".join(map(str, cap.nccl_version))
            return f"{flag}: torch on {where} is built with NCCL {version}; float8 reductions need NCCL 2.24 or newer"
        if cap.nccl_loaded is not None and cap.nccl_loaded < FLOAT8_MIN_NCCL:
            loaded, built = (".".join(map(str, v)) for v in (cap.nccl_loaded, cap.nccl_version))
            return (f"{flag}: torch on {where} loads NCCL {loaded} (built with {built}); float8 reductions need "
                    "NCCL 2.24 or newer")
    return None
