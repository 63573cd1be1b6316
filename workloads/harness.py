"""The only timing loop and the only correctness loop.

For each message size: allocate, fill, warm up, synchronise the group, time every iteration
(CUDA events on a GPU, a monotonic clock around each blocking call on the CPU; the same
iterations are also timed as one batch with a host clock, as nccl-tests does), then run the check
iterations on fresh inputs and count the wrong elements. What comes back are raw per-iteration
samples of this rank; the driver combines ranks. A workload other than a plain collective
(`workloads.overlap`) reuses these steps; the loop over sizes stays here.

Each size's buffers are released before the next is allocated (and cached blocks returned on a
GPU). A size whose buffers do not fit on some rank is skipped by every rank of the group (they
agree before any collective runs) and reported as that rank's error; the next size goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from workloads import registry
from workloads.data import SENTINEL, TORCH_DTYPES, count_wrong, tolerance, write
from workloads.dtypes import ELEMENT_BYTES, NO_OP
from workloads.messages import Case, Sample
from workloads.registry import OVERLAP, Collective, Ctx

_OPS = {
    "sum": dist.ReduceOp.SUM,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
    "prod": dist.ReduceOp.PRODUCT,
}

Timed = tuple[list[float], float]  # per-iteration microseconds, and the batch's per-iteration mean


class CountSkipped(Exception):
    """Some rank could not allocate this size; `error` is this rank's own reason, if it was one."""

    def __init__(self, error: str | None) -> None:
        super().__init__(error)
        self.error = error


def run_case(case: Case, rank: int, n: int, device: torch.device) -> list[Sample]:
    """Measure and check every count of `case`; this rank's sample per count."""
    if case.collective == OVERLAP:
        from workloads.overlap import measure
    else:
        measure = measure_collective
    out = []
    for count in case.counts:
        c = Ctx(rank, n, count, case.dtype, case.op, case.root, case.in_place, str(device))
        try:
            out.append(measure(case, c, device))
        except CountSkipped as e:
            out.append(Sample(count, (), 0, error=e.error))
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return out


def measure_collective(case: Case, c: Ctx, device: torch.device) -> Sample:
    coll = registry.get(case.collective)
    send, recv, call = prepare(coll, c, device)
    samples, batch_us = warm_and_time(call, case, device)
    n_wrong = check(coll, c, send, recv, call, case, device)
    return Sample(c.count, tuple(samples), n_wrong, batch_us)


def reduce_op(op: str) -> dist.ReduceOp | None:
    return _OPS[op] if op != NO_OP else None


def prepare(coll: Collective, c: Ctx, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, Callable[[], None]]:
    """Buffers filled with iteration 0's inputs, and the call on them; CountSkipped on every rank
    when some rank's buffers do not fit."""
    error = None
    try:
        send, recv = buffers(coll, c, device)
        fill(coll, c, send, recv, it=0)
    except (torch.OutOfMemoryError, RuntimeError) as e:
        if not _out_of_memory(e):
            raise
        send = recv = None
        error = f"out of memory for {coll.buffer_numel(c) * ELEMENT_BYTES[c.dtype]} bytes of buffers ({str(e).strip().splitlines()[0][:120]})"
        if device.type == "cuda":
            torch.cuda.empty_cache()
    everyone = torch.tensor([0 if error else 1], dtype=torch.int32, device=device)
    dist.all_reduce(everyone, op=dist.ReduceOp.MIN)
    if error or not int(everyone.item()):
        raise CountSkipped(error)
    return send, recv, coll.bind(c, send, recv, reduce_op(c.op))


def _out_of_memory(e: BaseException) -> bool:
    text = str(e)
    return isinstance(e, torch.OutOfMemoryError) or "can't allocate memory" in text or "out of memory" in text


def warm_and_time(call: Callable[[], None], case: Case, device: torch.device) -> Timed:
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
        expected = coll.expected(c)
        if expected is not None:
            n_wrong += count_wrong(recv, expected, c.n, it, c.op, c.dtype, tolerance(c.dtype, c.n, c.op))
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
    write(send, coll.inputs(c), c.n, it, c.op, c.dtype)


def _barrier(device: torch.device) -> None:
    # A one-element all_reduce works for gloo and NCCL alike (NCCL barriers need device ids).
    dist.all_reduce(torch.zeros(1, device=device))
    sync(device)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(call: Callable[[], None], iters: int, device: torch.device) -> Timed:
    """Microseconds of each of `iters` calls on this rank, and of the whole batch per call: host
    clock from the first launch to the end of the last (after a device sync), as nccl-tests."""
    if device.type == "cuda":
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        t0 = time.perf_counter()
        for start, end in zip(starts, ends):
            start.record()
            call()
            end.record()
        torch.cuda.synchronize(device)
        batch_us = (time.perf_counter() - t0) / iters * 1e6
        return [start.elapsed_time(end) * 1e3 for start, end in zip(starts, ends)], batch_us
    clock = time.perf_counter_ns
    samples = []
    t_batch = clock()
    for _ in range(iters):
        t0 = clock()
        call()
        samples.append((clock() - t0) / 1e3)
    return samples, (clock() - t_batch) / iters / 1e3
