"""A traced job's collectives as calls (`collbench replay`): each ReplayOp bound to buffers of its
sizes and dtype on its process group, as tiny plugins like workloads.collectives; the harness
(`run`, the registered workload "replay", made of the harness' clock and barrier) owns the loop
over steps and the timer. Nothing is checked: the data are
zeros, the point is the time of the job's own sequence."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from workloads import clocks, harness, registry
from workloads.messages import Case, ReplayOp, ReplayProgram, ReplayTiming


class Groups:
    """The trace's process groups on this cluster: the world group where a trace group holds every
    rank, else a new group, made by every rank in the same order (torch.distributed's rule)."""

    def __init__(self, program: ReplayProgram) -> None:
        self.ranks: dict[str, tuple[int, ...]] = {}
        self.handles: dict[str, object] = {}
        for name, _, ranks in sorted(program.groups):
            self.ranks[name] = ranks
            self.handles[name] = None if len(ranks) == program.world_size else dist.new_group(list(ranks))

    def destroy(self) -> None:
        for handle in self.handles.values():
            if handle is not None:
                dist.destroy_process_group(handle)


def bind(op: ReplayOp, groups: Groups, device: torch.device, buffers: dict) -> Callable[[], None]:
    """The call that issues `op` on this rank, its buffers taken from `buffers` (one per shape and
    dtype, shared by the ops that have it: a trace of a large model needs each size once)."""
    group, ranks = groups.handles[op.group], groups.ranks[op.group]
    n = len(ranks)
    dtype = getattr(torch, op.dtype)

    def buf(numel: int, role: str) -> torch.Tensor:
        key = (numel, op.dtype, role)
        if key not in buffers:
            buffers[key] = torch.zeros(max(numel, 1), dtype=dtype, device=device)
        return buffers[key]

    if op.kind == "all_reduce":
        t = buf(op.in_numel, "a")
        return lambda: dist.all_reduce(t, group=group)
    if op.kind == "all_gather":  # one count per rank: the input, n of them the output
        per_rank = max(op.in_numel, 1)
        inp, out = buf(per_rank, "a"), buf(per_rank * n, "b")
        return lambda: dist.all_gather_into_tensor(out, inp, group=group)
    if op.kind == "reduce_scatter":
        per_rank = max(op.in_numel // n, 1)
        inp, out = buf(per_rank * n, "a"), buf(per_rank, "b")
        return lambda: dist.reduce_scatter_tensor(out, inp, group=group)
    if op.kind == "all_to_all":
        numel = max(op.in_numel - op.in_numel % n, n)
        inp, out = buf(numel, "a"), buf(numel, "b")
        return lambda: dist.all_to_all_single(out, inp, group=group)
    if op.kind == "broadcast":
        t = buf(op.in_numel, "a")
        return lambda: dist.broadcast(t, src=ranks[0], group=group)
    if op.kind == "reduce":
        t = buf(op.in_numel, "a")
        return lambda: dist.reduce(t, dst=ranks[0], group=group)
    if op.kind == "barrier":  # a one-element all_reduce: NCCL's barrier needs device ids
        t = torch.zeros(1, device=device)
        return lambda: dist.all_reduce(t, group=group)
    raise ValueError(f"no replay for {op.kind}")


def run(case: Case, rank: int, n: int, device: torch.device) -> list[ReplayTiming]:
    """A traced job's steps on this rank (workloads.replay): `warmup_steps` untimed, then every
    step `repeat` times, each op timed alone (back to back, or at its traced offset from the
    step's start with `gaps`); the group meets at a barrier before each step. Every rank makes
    the groups and its buffers first, and all agree that they could before any op runs (a rank
    out of memory fails the group at once, naming itself, instead of leaving its peers waiting)."""
    program = case.replay
    groups, buffers, error = None, {}, None
    ops = program.ops[rank]
    try:
        groups = Groups(program)
        try:
            calls = [bind(op, groups, device, buffers) for op in ops]
        except (torch.OutOfMemoryError, RuntimeError) as e:
            if not harness.out_of_memory(e):
                raise
            buffers.clear()
            first = str(e).strip().splitlines()[0][:120]
            error = f"out of memory for the replay's buffers ({first})"
        everyone = torch.tensor([0 if error else 1], dtype=torch.int32, device=device)
        dist.all_reduce(everyone, op=dist.ReduceOp.MIN)
        if error or not int(everyone.item()):
            raise RuntimeError(error or "another rank could not allocate the replay's buffers")
        return _replayed(program, ops, calls, device)
    finally:
        buffers.clear()
        if groups is not None:
            groups.destroy()


def _replayed(program: ReplayProgram, ops, calls, device: torch.device) -> list[ReplayTiming]:
    clock = clocks.clock_for(device)
    out: list[ReplayTiming] = []
    for r in range(-program.warmup_steps, program.repeat):
        for step in range(program.steps):
            if r < 0 and step > 0:
                break  # a warm-up pass is one step: every group connected before the timed ones
            idx = [i for i, op in enumerate(ops) if op.step == step]
            starts, ends = clock.markers(len(idx)), clock.markers(len(idx))
            harness.barrier(device)
            t0 = time.perf_counter()
            for k, i in enumerate(idx):
                if program.gaps:
                    wait_s = ops[i].offset_us / 1e6 - (time.perf_counter() - t0)
                    if wait_s > 0:
                        time.sleep(wait_s)
                starts[k] = clock.record(starts[k])
                calls[i]()
                ends[k] = clock.record(ends[k])
            clock.sync()
            if r >= 0:
                out += [ReplayTiming(i, r, clock.elapsed_us(starts[k], ends[k])) for k, i in enumerate(idx)]
    return out


registry.register_workload(registry.Workload(registry.REPLAY, run))
