"""overlap: a matmul and all_reduce alone and together, on the same group.

Per count: all_reduce alone, a square matmul alone (`compute_flops`, or sized to take about as
long as the collective), and both issued together (the collective started with async_op=True
while the matmul runs; on a GPU NCCL runs on its own stream). The all_reduce result of the
overlapped step is checked like any other. The harness' steps do the timing and the check.
"""

from __future__ import annotations

import functools
import time

import torch
import torch.distributed as dist

from workloads import harness, registry
from workloads.messages import Case, Sample
from workloads.registry import Ctx


def measure(case: Case, c: Ctx, device: torch.device) -> Sample:
    coll = registry.get("all_reduce")
    send, recv, comm = harness.prepare(coll, c, device)
    comm_us = harness.warm_and_time(comm, case, device)
    dim = _matmul_dim(case.compute_flops, sum(comm_us) / len(comm_us), device)
    mat_dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    a, b = (torch.ones(dim, dim, dtype=mat_dtype, device=device) for _ in range(2))
    prod = torch.empty(dim, dim, dtype=mat_dtype, device=device)
    compute = functools.partial(torch.mm, a, b, out=prod)
    op = harness.reduce_op(c.op)

    def both() -> None:
        work = dist.all_reduce(recv, op=op, async_op=True)
        compute()
        work.wait()

    comp_us = harness.warm_and_time(compute, case, device)
    step_us = harness.warm_and_time(both, case, device)
    n_wrong = harness.check(coll, c, send, recv, both, case, device)
    return Sample(c.count, tuple(comm_us), n_wrong, comp_us=tuple(comp_us), step_us=tuple(step_us),
                  compute_flops=2.0 * dim**3)


def _matmul_dim(flops: float, comm_us: float, device: torch.device) -> int:
    """Side of the square matmul: from the requested flops, or timed so one matmul takes about as
    long as the collective. Every rank uses the largest side any rank chose."""
    if flops > 0:
        dim = round((flops / 2) ** (1 / 3))
    else:
        probe = 256
        dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
        a = torch.ones(probe, probe, dtype=dtype, device=device)
        torch.mm(a, a)
        harness.sync(device)
        t0 = time.perf_counter()
        for _ in range(5):
            torch.mm(a, a)
        harness.sync(device)
        probe_us = (time.perf_counter() - t0) / 5 * 1e6
        dim = int(probe * max(comm_us / probe_us, 1e-3) ** (1 / 3))
    agreed = torch.tensor([max(dim, 16)], dtype=torch.float64, device=device)
    dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
    return int(agreed.item())
