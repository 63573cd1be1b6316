"""The harness' clocks (a host clock around each blocking call, CUDA events on a GPU), its timing
of every call and of the batch as nccl-tests times it, and the two floors a row is read against:
the empty-call floor (the batch loop dispatching nothing: a `time_us_batch` near it measures the
loop) and the dispatch floor (c10d's own cost of one collective call, the time a one-rank in-place
all_reduce takes, for which NCCL launches nothing and gloo copies nothing: a `time_us` near it
measures torch's dispatch, not the fabric).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

Timed = tuple[list[float], float]  # per-iteration microseconds, and the batch's per-iteration mean

FLOOR_ITERS = 1000  # the empty loop is timed over this many calls: per call, a fraction of a microsecond
DISPATCH_ITERS = 200  # one-rank all_reduces timed for the dispatch floor, after DISPATCH_WARMUP
DISPATCH_WARMUP = 20


class HostClock:
    """The CPU's clock: a mark is a reading taken when the blocking call before it returned."""

    cheap = True  # a reading costs ~0.1 us against a call's tens: one pass gives both timings

    def markers(self, k: int) -> list:
        return [None] * k

    def record(self, marker) -> int:
        return time.perf_counter_ns()

    def sync(self) -> None:
        pass

    def elapsed_us(self, start: int, end: int) -> float:
        return (end - start) / 1e3


class EventClock:
    """A GPU's clock: marks are CUDA events on its device's current stream, read after a device
    sync. The stream is named, not left to torch's default (the current device's): an event made on
    another device than the collective's would time nothing of it."""

    cheap = False  # each record is a host call and a stream operation: keep them out of the batch

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def markers(self, k: int) -> list:
        return [torch.cuda.Event(enable_timing=True) for _ in range(k)]

    def record(self, marker):
        marker.record(torch.cuda.current_stream(self.device))
        return marker

    def sync(self) -> None:
        torch.cuda.synchronize(self.device)

    def elapsed_us(self, start, end) -> float:
        return start.elapsed_time(end) * 1e3


def clock_for(device: torch.device) -> HostClock | EventClock:
    return EventClock(device) if device.type == "cuda" else HostClock()


def timed(call: Callable[[], None], iters: int, clock, captured=None, barrier: Callable[[], None] = lambda: None
          ) -> Timed:
    """Microseconds of each of `iters` calls on this rank, and of the whole batch per call: on a cheap
    clock both from one pass; otherwise a second pass marked only at its ends (a replay of
    `captured`, a CUDA graph of the batch, when given), after `barrier`."""
    starts, ends = clock.markers(iters), clock.markers(iters)
    for i in range(iters):
        starts[i] = clock.record(starts[i])
        call()
        ends[i] = clock.record(ends[i])
    clock.sync()
    samples = [clock.elapsed_us(a, b) for a, b in zip(starts, ends)]
    if clock.cheap and captured is None:
        return samples, clock.elapsed_us(starts[0], ends[-1]) / iters
    barrier()
    if captured is not None:
        return samples, batch(captured.replay, 1, clock) / iters
    return samples, batch(call, iters, clock)


def batch(call: Callable[[], None], iters: int, clock) -> float:
    """Per-call microseconds of `iters` back-to-back calls, marked only before the first and after
    the last (nccl-tests' timing)."""
    start, end = clock.markers(2)
    start = clock.record(start)
    for _ in range(iters):
        call()
    end = clock.record(end)
    clock.sync()
    return clock.elapsed_us(start, end) / iters


def _nothing() -> None:
    pass


def batch_floor_us(device: torch.device, iters: int = FLOOR_ITERS) -> float:
    """The empty-call floor: the batch timing of the same loop dispatching no collective, per call.
    A `time_us_batch` near it measures the loop, not the collective."""
    if device.type != "cuda":
        return timed(_nothing, iters, HostClock())[1]
    with torch.cuda.device(device):  # events on this device's stream, as the group's calls
        return timed(_nothing, iters, EventClock(device))[1]


def dispatch_floor_us(backend: str, device: torch.device, iters: int = DISPATCH_ITERS) -> float | None:
    """c10d's own cost of one call on `backend`: the median time of an in-place all_reduce of one
    element on a one-rank group of this process alone (NCCL launches no kernel for it, gloo copies
    nothing), timed per call as the harness times a collective; None where a group is formed (the
    process' one default group is in use). 42.4 us a call through NCCL on the recorded H200 (its
    one-rank in-place all_reduces), where NCCL's own model of an 8-GPU NVLink all_reduce is 10-15 us
    (issue 56)."""
    if dist.is_initialized():
        return None
    extra = {"device_id": device} if backend == "nccl" else {}
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, **extra)
    try:
        one = torch.zeros(1, device=device)
        for _ in range(DISPATCH_WARMUP):
            dist.all_reduce(one)
        samples, _ = timed(lambda: dist.all_reduce(one), iters, clock_for(device))
        return statistics.median(samples)
    finally:
        dist.destroy_process_group()
