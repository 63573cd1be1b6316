"""reduce to the root: the root ends with the reduction; other ranks' buffers are undefined."""

from __future__ import annotations

import torch
import torch.distributed as dist

from workloads.data import ALL, Span
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

    def inputs(self, c: Ctx) -> list[Span]:
        return [Span(0, c.count, c.rank)]

    def expected(self, c: Ctx) -> list[Span] | None:
        return [Span(0, c.count, ALL)] if c.rank == c.root else None

    def call(self, c: Ctx, send: torch.Tensor, recv: torch.Tensor, op: dist.ReduceOp | None) -> None:
        dist.reduce(recv, dst=c.root, op=op)
