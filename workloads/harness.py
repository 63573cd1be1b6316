"""The only timing loop and the only correctness loop.

For each message size: allocate, fill, warm up, synchronise the group, time every iteration
(CUDA events on a GPU, a monotonic clock around each blocking call on the CPU), then run the
check iterations on fresh inputs and count the wrong elements. What comes back are raw
per-iteration samples of this rank; the driver combines ranks.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from workloads import registry
from workloads.data import SENTINEL, TORCH_DTYPES, count_wrong, tolerance
from workloads.dtypes import NO_OP
from workloads.registry import Ctx

_OPS = {
    "sum": dist.ReduceOp.SUM,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
    "prod": dist.ReduceOp.PRODUCT,
}


@dataclass(frozen=True)
class Case:
    """One (collective, dtype, op, in_place) over a list of element counts."""

    collective: str
    dtype: str
    op: str
    in_place: bool
    counts: tuple[int, ...]
    iters: int
    warmup: int
    check_iters: int
    root: int = 0
    compute_flops: float = 0.0  # overlap only: matmul size (0: matched to the collective's time)


OVERLAP = "overlap"


def run_case(case: Case, rank: int, n: int, device: torch.device) -> list[dict]:
    """Measure and check every count of `case`; return this rank's samples per count."""
    if case.collective == OVERLAP:
        return run_overlap(case, rank, n, device)
    coll = registry.get(case.collective)
    op = _OPS.get(case.op) if case.op != NO_OP else None
    out = []
    for count in case.counts:
        c = Ctx(rank, n, count, case.dtype, case.op, case.root, case.in_place, str(device))
        send, recv, call = _prepare(coll, c, op, device)
        samples = _warm_and_time(call, case, device)
        n_wrong = _check(coll, c, send, recv, call, case, device)
        out.append({"count": count, "iter_time_us": samples, "n_wrong": n_wrong})
        del send, recv
    return out


def _prepare(coll, c: Ctx, op, device: torch.device):
    """Buffers filled with iteration 0's inputs, and the call on them."""
    send, recv = _buffers(coll, c, device)
    _fill(coll, c, send, recv, it=0)
    return send, recv, functools.partial(coll.call, c, send, recv, op)


def _warm_and_time(call: Callable[[], None], case: Case, device: torch.device) -> list[float]:
    for _ in range(case.warmup):
        call()
    _barrier(device)
    return _timed(call, case.iters, device)


def _check(coll, c: Ctx, send, recv, call: Callable[[], None], case: Case, device: torch.device) -> int:
    """Wrong elements over the check iterations, each on fresh inputs."""
    n_wrong = 0
    for it in range(1, case.check_iters + 1):
        _fill(coll, c, send, recv, it)
        call()
        _sync(device)
        expected = coll.expected(c, it)
        if expected is not None:
            n_wrong += count_wrong(recv, expected, tolerance(c.dtype, c.n, c.op))
    return n_wrong


def run_overlap(case: Case, rank: int, n: int, device: torch.device) -> list[dict]:
    """Per count, on the same group: a matmul alone, all_reduce alone, and both issued together
    (the collective started with async_op=True while the matmul runs; on a GPU NCCL runs on its
    own stream). The all_reduce result of the overlapped step is checked like any other."""
    coll = registry.get("all_reduce")
    op = _OPS["sum"]
    out = []
    for count in case.counts:
        c = Ctx(rank, n, count, case.dtype, "sum", case.root, True, str(device))
        send, recv, comm = _prepare(coll, c, op, device)
        comm_us = _warm_and_time(comm, case, device)
        dim = _matmul_dim(case.compute_flops, sum(comm_us) / len(comm_us), device)
        mat_dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
        a, b = (torch.ones(dim, dim, dtype=mat_dtype, device=device) for _ in range(2))
        prod = torch.empty(dim, dim, dtype=mat_dtype, device=device)
        compute = functools.partial(torch.mm, a, b, out=prod)

        def both() -> None:
            work = dist.all_reduce(recv, op=op, async_op=True)
            compute()
            work.wait()

        comp_us = _warm_and_time(compute, case, device)
        step_us = _warm_and_time(both, case, device)
        n_wrong = _check(coll, c, send, recv, both, case, device)
        out.append({"count": count, "iter_time_us": comm_us, "comp_us": comp_us, "step_us": step_us,
                    "compute_flops": 2.0 * dim**3, "n_wrong": n_wrong})
    return out


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
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(5):
            torch.mm(a, a)
        _sync(device)
        probe_us = (time.perf_counter() - t0) / 5 * 1e6
        dim = int(probe * max(comm_us / probe_us, 1e-3) ** (1 / 3))
    agreed = torch.tensor([max(dim, 16)], dtype=torch.float64, device=device)
    dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
    return int(agreed.item())


def _buffers(coll, c: Ctx, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    dtype = TORCH_DTYPES[c.dtype]
    if c.in_place:
        big = max(coll.send_numel(c), coll.recv_numel(c))
        whole = torch.empty(big, dtype=dtype, device=device)
        return coll.alias(c, whole, whole)
    send = torch.empty(coll.send_numel(c), dtype=dtype, device=device)
    recv = torch.empty(coll.recv_numel(c), dtype=dtype, device=device)
    return send, recv


def _fill(coll, c: Ctx, send: torch.Tensor, recv: torch.Tensor, it: int) -> None:
    # Sentinel first, inputs second: for in-place modes the send buffer lies inside the
    # receive buffer (or the other way round) and the inputs must win.
    recv.fill_(SENTINEL)
    send.copy_(coll.inputs(c, it))


def _barrier(device: torch.device) -> None:
    # A one-element all_reduce works for gloo and NCCL alike (NCCL barriers need device ids).
    dist.all_reduce(torch.zeros(1, device=device))
    _sync(device)


def _sync(device: torch.device) -> None:
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
