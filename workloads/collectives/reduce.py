"""reduce to the root: the root ends with the reduction; other ranks' buffers are undefined."""

from __future__ import annotations

import torch
import torch.distributed as dist

from workloads.data import reduced, values
from workloads.registry import Collective, Ctx, register


@register
class Reduce(Collective):
    name = "reduce"
    reduces = True
    # torch.distributed.reduce works on one buffer.
    in_place_modes = (True,)

    @staticmethod
    def busbw_factor(n: int) -> float:
        return 1.0

    def inputs(self, c: Ctx, it: int) -> torch.Tensor:
        return values(c.rank, it, 0, c.count, c.op, c.dtype, c.device)

    def expected(self, c: Ctx, it: int) -> torch.Tensor | None:
        if c.rank != c.root:
            return None
        return reduced(c.n, it, 0, c.count, c.op, c.dtype, c.device)

    def call(self, c: Ctx, send: torch.Tensor, recv: torch.Tensor, op: dist.ReduceOp | None) -> None:
        dist.reduce(recv, dst=c.root, op=op)
