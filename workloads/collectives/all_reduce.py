"""all_reduce: every rank ends with the reduction of all ranks' buffers."""

from __future__ import annotations

import torch
import torch.distributed as dist

from workloads.data import ALL, Span
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

    def inputs(self, c: Ctx) -> list[Span]:
        return [Span(0, c.count, c.rank)]

    def expected(self, c: Ctx) -> list[Span] | None:
        return [Span(0, c.count, ALL)]

    def call(self, c: Ctx, send: torch.Tensor, recv: torch.Tensor, op: dist.ReduceOp | None) -> None:
        dist.all_reduce(recv, op=op)
