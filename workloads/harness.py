"""The only timing loop and the only correctness loop.

For each message size: allocate, fill, warm up, synchronise the group, time every iteration
(CUDA events on a GPU, a monotonic clock around each blocking call on the CPU), then run the
check iterations on fresh inputs and count the wrong elements. What comes back are raw
per-iteration samples of this rank; the driver combines ranks. A workload other than a plain
collective (`workloads.overlap`) reuses these steps; the loop over sizes stays here.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from workloads import registry
from workloads.data import SENTINEL, TORCH_DTYPES, count_wrong, tolerance
from workloads.dtypes import NO_OP
from workloads.messages import Case, Sample
from workloads.registry import OVERLAP, Collective, Ctx

_OPS = {
    "sum": dist.ReduceOp.SUM,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
    "prod": dist.ReduceOp.PRODUCT,
}

Measure = Callable[[Case, Ctx, torch.device], Sample]


def run_case(case: Case, rank: int, n: int, device: torch.device) -> list[Sample]:
    """Measure and check every count of `case`; this rank's sample per count. Each size's
    buffers are released before the next size is allocated."""
    if case.collective == OVERLAP:
        from workloads.overlap import measure
    else:
        measure = measure_collective
    return [
        measure(case, Ctx(rank, n, count, case.dtype, case.op, case.root, case.in_place, str(device)), device)
        for count in case.counts
    ]


def measure_collective(case: Case, c: Ctx, device: torch.device) -> Sample:
    coll = registry.get(case.collective)
    send, recv, call = prepare(coll, c, device)
    samples = warm_and_time(call, case, device)
    n_wrong = check(coll, c, send, recv, call, case, device)
    return Sample(c.count, tuple(samples), n_wrong)


def reduce_op(op: str) -> dist.ReduceOp | None:
    return _OPS[op] if op != NO_OP else None


def prepare(coll: Collective, c: Ctx, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, Callable[[], None]]:
    """Buffers filled with iteration 0's inputs, and the call on them."""
    send, recv = buffers(coll, c, device)
    fill(coll, c, send, recv, it=0)
    return send, recv, functools.partial(coll.call, c, send, recv, reduce_op(c.op))


def warm_and_time(call: Callable[[], None], case: Case, device: torch.device) -> list[float]:
    for _ in range(case.warmup):
        call()
    _barrier(device)
    return _timed(call, case.iters, device)


def check(coll: Collective, c: Ctx, send: torch.Tensor, recv: torch.Tensor, call: Callable[[], None],
          case: Case, device: torch.device) -> int:
    """Wrong elements over the check iterations, each on fresh inputs."""
    n_wrong = 0
    for it in range(1, case.check_iters + 1):
        fill(coll, c, send, recv, it)
        call()
        sync(device)
        expected = coll.expected(c, it)
        if expected is not None:
            n_wrong += count_wrong(recv, expected, tolerance(c.dtype, c.n, c.op))
    return n_wrong


def buffers(coll: Collective, c: Ctx, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    dtype = TORCH_DTYPES[c.dtype]
    if c.in_place:
        big = max(coll.send_numel(c), coll.recv_numel(c))
        whole = torch.empty(big, dtype=dtype, device=device)
        return coll.alias(c, whole, whole)
    send = torch.empty(coll.send_numel(c), dtype=dtype, device=device)
    recv = torch.empty(coll.recv_numel(c), dtype=dtype, device=device)
    return send, recv


def fill(coll: Collective, c: Ctx, send: torch.Tensor, recv: torch.Tensor, it: int) -> None:
    # Sentinel first, inputs second: for in-place modes the send buffer lies inside the
    # receive buffer (or the other way round) and the inputs must win.
    recv.fill_(SENTINEL)
    send.copy_(coll.inputs(c, it))


def _barrier(device: torch.device) -> None:
    # A one-element all_reduce works for gloo and NCCL alike (NCCL barriers need device ids).
    dist.all_reduce(torch.zeros(1, device=device))
    sync(device)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(call: Callable[[], None], iters: int, device: torch.device) -> list[float]:
    """Microseconds of each of `iters` calls on this rank."""
    if device.type == "cuda":
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        for start, end in zip(starts, ends):
            start.record()
            call()
            end.record()
        torch.cuda.synchronize(device)
        return [start.elapsed_time(end) * 1e3 for start, end in zip(starts, ends)]
    clock = time.perf_counter_ns
    samples = []
    for _ in range(iters):
        t0 = clock()
        call()
        samples.append((clock() - t0) / 1e3)
    return samples
