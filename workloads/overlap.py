"""overlap: a matmul and all_reduce alone and together, on the same group.

Per count: all_reduce alone, a square matmul alone (`compute_flops`, or sized to take about as
long as the collective: the device's rate is measured at a compute-bound size with its own clock),
and both issued together (the collective started with async_op=True
while the matmul runs; on a GPU NCCL runs on its own stream). The all_reduce result of the
overlapped step is checked like any other. The harness' steps do the timing and the check.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from workloads import harness, registry
from workloads.messages import Case, Sample
from workloads.registry import Ctx


def measure(case: Case, c: Ctx, device: torch.device) -> Sample:
    coll = registry.get("all_reduce")
    # the matmul's three matrices, at their largest, beside the buffers
    matrices_bytes = 3 * _MAX_DIM[device.type] ** 2 * _dtype(device).itemsize
    send, recv, comm = harness.prepare(coll, c, device, extra_bytes=matrices_bytes)
    comm_us, batch_us = harness.warm_and_time(comm, case, device)
    dim, reps = _agree(_matmul_size(case.compute_flops, sum(comm_us) / len(comm_us), device), device)
    a, b = (torch.ones(dim, dim, dtype=_dtype(device), device=device) for _ in range(2))
    prod = torch.empty(dim, dim, dtype=_dtype(device), device=device)

    def compute() -> None:
        for _ in range(reps):
            torch.mm(a, b, out=prod)

    op = harness.reduce_op(c.op)

    def both() -> None:
        work = dist.all_reduce(recv, op=op, async_op=True)
        compute()
        work.wait()

    comp_us, _ = harness.warm_and_time(compute, case, device)
    step_us, _ = harness.warm_and_time(both, case, device)
    n_wrong = harness.check(coll, c, send, recv, both, case, device)
    return Sample(c.count, tuple(comm_us), n_wrong, batch_us, comp_us=tuple(comp_us), step_us=tuple(step_us),
                  compute_flops=2.0 * dim**3 * reps)


# Largest matmul side (three matrices of it must fit beside the buffers); longer work repeats it.
_MAX_DIM = {"cuda": 8192, "cpu": 2048}
# A side at which a matmul is compute-bound, to measure the device's rate (not launch overhead).
_PROBE_DIM = {"cuda": 4096, "cpu": 384}


def _dtype(device: torch.device) -> torch.dtype:
    return torch.float32 if device.type == "cpu" else torch.bfloat16


def _matmul_size(flops: float, target_us: float, device: torch.device) -> tuple[int, int]:
    """(side, repetitions) of the square matmul: from the requested flops, or sized so that the
    work takes about `target_us` (the collective's time). The rate is measured at a compute-bound
    size with the device's own clock, then the chosen size is timed once and corrected."""
    top = _MAX_DIM[device.type]
    if flops > 0:
        dim = round((flops / 2) ** (1 / 3))
        reps = max(1, round((dim / top) ** 3)) if dim > top else 1
        return min(dim, top), reps
    probe = _PROBE_DIM[device.type]
    flops_per_us = 2 * probe**3 / _time_matmul(probe, device)
    dim = min(top, max(16, int((flops_per_us * target_us / 2) ** (1 / 3))))
    took = _time_matmul(dim, device)
    if dim < top:
        return min(top, max(16, int(dim * (target_us / took) ** (1 / 3)))), 1
    return dim, max(1, round(target_us / took))


def _time_matmul(dim: int, device: torch.device, reps: int = 3) -> float:
    """Microseconds of one dim x dim matmul, after a warm-up (CUDA events on a GPU)."""
    a = torch.ones(dim, dim, dtype=_dtype(device), device=device)
    out = torch.empty_like(a)
    torch.mm(a, a, out=out)
    harness.sync(device)
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            torch.mm(a, a, out=out)
        end.record()
        torch.cuda.synchronize(device)
        return start.elapsed_time(end) * 1e3 / reps
    t0 = time.perf_counter()
    for _ in range(reps):
        torch.mm(a, a, out=out)
    return (time.perf_counter() - t0) * 1e6 / reps


def _agree(size: tuple[int, int], device: torch.device) -> tuple[int, int]:
    """Every rank uses the largest side and repetitions any rank chose."""
    agreed = torch.tensor(size, dtype=torch.float64, device=device)
    dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
    return int(agreed[0].item()), int(agreed[1].item())


registry.register_workload(registry.Workload(registry.OVERLAP, harness.each_count(measure)))
