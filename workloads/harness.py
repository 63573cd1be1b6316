"""The only timing loop and the only correctness loop.

For each message size: allocate, fill, warm up, synchronise the group, time every iteration
(CUDA events around each call on a GPU, a monotonic clock around each blocking call on the CPU),
time the batch as nccl-tests does (on a GPU a second pass with events only around the whole batch,
so that below ~1 MiB it measures NCCL, not two event records per call; with --cuda-graph the batch
is captured in a CUDA graph and replayed, as nccl-tests' -G; on the CPU the same pass's first and
last clock readings), then run the check iterations on fresh inputs and count the wrong elements.
What comes back are raw per-iteration samples of this rank; the driver combines ranks. A workload
other than a plain collective (`workloads.overlap`, `workloads.replay`) registers its own run
(registry.Workload), made of these steps; the loop over sizes stays here. The clocks, and the
floors a row is read against, are workloads.clocks'.

Each size's buffers are released before the next is allocated (and cached blocks returned on a
GPU). Before allocating, a GPU rank compares what the size needs with the memory free on its
device, measured then (after the group's first collectives, so the CUDA context and NCCL's
buffers so far are counted), less a headroom for what NCCL connects lazily on first use. A size
that does not fit on some rank, by that check or by an allocation failing, is skipped by every
rank of the group (they agree before any collective runs) and reported as that rank's error with
the numbers; the next size goes on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
import torch.distributed as dist

from workloads import registry
from workloads.clocks import Timed, clock_for, timed
from workloads.contention import Meter
from workloads.data import SENTINEL, TORCH_DTYPES, count_wrong, write
from workloads.dtypes import ELEMENT_BYTES, NO_OP
from workloads.memory import headroom_bytes_for, peak_bytes
from workloads.messages import Case, Sample
from workloads.registry import Collective, Ctx

_OPS = {
    "sum": dist.ReduceOp.SUM,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
    "prod": dist.ReduceOp.PRODUCT,
}



class CountSkipped(Exception):
    """Some rank could not allocate this size; `error` is this rank's own reason, if it was one."""

    def __init__(self, error: str | None) -> None:
        super().__init__(error)
        self.error = error


def run_case(case: Case, rank: int, n: int, device: torch.device) -> list:
    """Run `case` on this rank: a plain collective measured and checked count by count here; any
    other workload (overlap, replay) by its registered run, made of the steps below."""
    special = registry.workload(case.collective)
    run = special.run if special else each_count(measure_collective)
    return run(case, rank, n, device)


def each_count(measure: Callable[[Case, Ctx, torch.device], Sample]) -> Callable[..., list[Sample]]:
    """The loop over a case's counts around `measure` of one count: this rank's sample per count,
    with how contended its host was meanwhile (workloads.contention), a count some rank could not
    allocate recorded as skipped with its reason."""

    def run(case: Case, rank: int, n: int, device: torch.device) -> list[Sample]:
        out = []
        for count in case.counts:
            c = Ctx(rank, n, count, case.dtype, case.op, case.root, case.in_place, str(device), case.traffic)
            meter = Meter()
            try:
                out.append(dataclasses.replace(measure(case, c, device), host=meter.read()))
            except CountSkipped as e:
                out.append(Sample(count, (), 0, error=e.error))
            if device.type == "cuda":
                torch.cuda.empty_cache()
        return out

    return run


def measure_collective(case: Case, c: Ctx, device: torch.device) -> Sample:
    coll = registry.get(case.collective)
    check_too = case.check_iters > 0
    base = _reset_peak(device)
    send, recv, call = prepare(coll, c, device, check=check_too)
    samples, batch_us = warm_and_time(call, case, device, graph=case.cuda_graph)
    n_wrong = check(coll, c, send, recv, call, case, device)
    peak = _peak_since(base, device)
    estimate = peak_bytes(coll, c, "nccl", check_too) if peak is not None else None
    return Sample(c.count, tuple(samples), n_wrong, batch_us, mem_peak_bytes=peak, mem_estimate_bytes=estimate)


def _reset_peak(device: torch.device) -> int | None:
    """On a GPU: start counting this size's peak; what torch holds allocated now (None on the CPU)."""
    if device.type != "cuda":
        return None
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device)


def _peak_since(base: int | None, device: torch.device) -> int | None:
    """The most torch allocated on the GPU beyond `base` since `_reset_peak`: the size's buffers,
    the check's scratch and what the collective allocated through torch (the estimate's terms)."""
    if base is None:
        return None
    return torch.cuda.max_memory_allocated(device) - base


def reduce_op(op: str) -> dist.ReduceOp | None:
    return _OPS[op] if op != NO_OP else None


def prepare(coll: Collective, c: Ctx, device: torch.device, check: bool = True, extra_bytes: int = 0
            ) -> tuple[torch.Tensor, torch.Tensor, Callable[[], None]]:
    """Buffers filled with iteration 0's inputs, and the call on them; CountSkipped on every rank
    when some rank's size does not fit (`extra_bytes`: what the workload allocates beside them)."""
    send = recv = None
    error = memory_problem(peak_bytes(coll, c, "nccl" if device.type == "cuda" else "gloo", check) + extra_bytes,
                           device)
    if error is None:
        try:
            send, recv = buffers(coll, c, device)
            fill(coll, c, send, recv, it=0)
        except (torch.OutOfMemoryError, RuntimeError) as e:
            if not out_of_memory(e):
                raise
            send = recv = None
            first = str(e).strip().splitlines()[0][:120]
            error = f"out of memory for {coll.buffer_numel(c) * ELEMENT_BYTES[c.dtype]} bytes of buffers ({first})"
            if device.type == "cuda":
                torch.cuda.empty_cache()
    everyone = torch.tensor([0 if error else 1], dtype=torch.int32, device=device)
    dist.all_reduce(everyone, op=dist.ReduceOp.MIN)
    if error or not int(everyone.item()):
        raise CountSkipped(error)
    return send, recv, coll.bind(c, send, recv, reduce_op(c.op))


def memory_problem(need_bytes: int, device: torch.device) -> str | None:
    """Why `need_bytes` cannot be allocated on `device` now, with the numbers; None when they fit or
    when nothing is measured (on the CPU an allocation that fails says so itself)."""
    free = free_bytes(device)
    if free is None:
        return None
    headroom = nccl_headroom_bytes(device)
    if need_bytes + headroom <= free:
        return None
    return (f"needs {need_bytes} bytes of buffers and check on {device}, {free} bytes free there after the CUDA "
            f"context and NCCL's buffers; {headroom} more are kept for what NCCL connects on first use")


def free_bytes(device: torch.device) -> int | None:
    """Bytes this process can still allocate on `device`: free on the device plus what torch's
    allocator holds unused; None off a GPU."""
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)


def nccl_headroom_bytes(device: torch.device) -> int:
    return headroom_bytes_for(torch.cuda.get_device_capability(device) if device.type == "cuda" else (0, 0))



def out_of_memory(e: BaseException) -> bool:
    text = str(e)
    return isinstance(e, torch.OutOfMemoryError) or "can't allocate memory" in text or "out of memory" in text


def warm_and_time(call: Callable[[], None], case: Case, device: torch.device, graph: bool = False) -> Timed:
    """Warm up, then time each iteration and the batch (`graph`: the batch replayed from a CUDA
    graph, captured before anything is timed so that a refusal costs no measurement)."""
    for _ in range(case.warmup):
        call()
    captured = capture(call, case.iters, device) if graph else None
    barrier(device)
    return timed(call, case.iters, clock_for(device), captured, lambda: barrier(device))


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
            n_wrong += count_wrong(recv, expected, c.n, it, c.op, c.dtype)
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


def barrier(device: torch.device) -> None:
    # A one-element all_reduce works for gloo and NCCL alike (NCCL barriers need device ids).
    dist.all_reduce(torch.zeros(1, device=device))
    sync(device)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def capture(call: Callable[[], None], iters: int, device: torch.device) -> torch.cuda.CUDAGraph:
    """`iters` calls captured in one CUDA graph (after the warm-up: NCCL's communicator exists). Every
    rank agrees first: a rank whose capture failed would leave the others' replays waiting."""
    error, graph = None, None
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(iters):
                call()
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0][:160]
        graph, error = None, f"--cuda-graph: the batch could not be captured in a CUDA graph ({first})"
    everyone = torch.tensor([0 if error else 1], dtype=torch.int32, device=device)
    dist.all_reduce(everyone, op=dist.ReduceOp.MIN)
    if error or not int(everyone.item()):
        raise CountSkipped(error)
    return graph
