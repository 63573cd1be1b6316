"""A traced job's collectives as calls (`collbench replay`): each ReplayOp bound to buffers of its
sizes and dtype on its process group, as tiny plugins like workloads.collectives; the harness
(`harness.run_replay`) owns the loop over steps and the timer. Nothing is checked: the data are
zeros, the point is the time of the job's own sequence."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from workloads.messages import ReplayOp, ReplayProgram


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
