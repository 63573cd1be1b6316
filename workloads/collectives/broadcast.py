"""broadcast from the root: every rank ends with the root's buffer."""

from __future__ import annotations

import torch
import torch.distributed as dist

from workloads.data import Span
from workloads.registry import Collective, Ctx, register


@register
class Broadcast(Collective):
    name = "broadcast"
    # torch.distributed.broadcast works on one buffer.
    in_place_modes = (True,)

    @staticmethod
    def busbw_factor(n: int) -> float:
        return 1.0

    def inputs(self, c: Ctx) -> list[Span]:
        # Every rank starts with its own data, so a rank that missed the root's is caught.
        return [Span(0, c.count, c.rank)]

    def expected(self, c: Ctx) -> list[Span] | None:
        return [Span(0, c.count, c.root)]

    def call(self, c: Ctx, send: torch.Tensor, recv: torch.Tensor, op: dist.ReduceOp | None) -> None:
        dist.broadcast(recv, src=c.root)
