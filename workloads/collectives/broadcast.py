"""broadcast from the root: every rank ends with the root's buffer."""

from __future__ import annotations

import torch
import torch.distributed as dist

from workloads.data import values
from workloads.dtypes import NO_OP as OP
from workloads.registry import Collective, Ctx, register


@register
class Broadcast(Collective):
    name = "broadcast"
    # torch.distributed.broadcast works on one buffer.
    in_place_modes = (True,)

    @staticmethod
    def busbw_factor(n: int) -> float:
        return 1.0

    def inputs(self, c: Ctx, it: int) -> torch.Tensor:
        # Every rank starts with its own data, so a rank that missed the root's is caught.
        return values(c.rank, it, 0, c.count, OP, c.dtype, c.device)

    def expected(self, c: Ctx, it: int) -> torch.Tensor | None:
        return values(c.root, it, 0, c.count, OP, c.dtype, c.device)

    def call(self, c: Ctx, send: torch.Tensor, recv: torch.Tensor, op: dist.ReduceOp | None) -> None:
        dist.broadcast(recv, src=c.root)
