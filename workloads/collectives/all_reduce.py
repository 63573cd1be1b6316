"""all_reduce: every rank ends with the reduction of all ranks' buffers."""

from __future__ import annotations

import torch
import torch.distributed as dist

from workloads.data import reduced, values
from workloads.registry import Collective, Ctx, register


@register
class AllReduce(Collective):
    name = "all_reduce"
    reduces = True
    # torch.distributed.all_reduce has no out-of-place form.
    in_place_modes = (True,)

    @staticmethod
    def busbw_factor(n: int) -> float:
        return 2 * (n - 1) / n

    def inputs(self, c: Ctx, it: int) -> torch.Tensor:
        return values(c.rank, it, 0, c.count, c.op, c.dtype, c.device)

    def expected(self, c: Ctx, it: int) -> torch.Tensor | None:
        return reduced(c.n, it, 0, c.count, c.op, c.dtype, c.device)

    def call(self, c: Ctx, send: torch.Tensor, recv: torch.Tensor, op: dist.ReduceOp | None) -> None:
        dist.all_reduce(recv, op=op)
