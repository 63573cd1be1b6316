"""all_to_all on single tensors: chunk j of rank i's input lands as chunk i on rank j."""

from __future__ import annotations

import torch
import torch.distributed as dist

from workloads.data import values
from workloads.dtypes import NO_OP as OP
from workloads.registry import Collective, Ctx, register


@register
class AllToAll(Collective):
    name = "all_to_all"
    splits = True
    # The input is still being read while peers' chunks arrive: no in-place form.
    in_place_modes = (False,)

    @staticmethod
    def busbw_factor(n: int) -> float:
        return (n - 1) / n

    def inputs(self, c: Ctx, it: int) -> torch.Tensor:
        return values(c.rank, it, 0, c.count, OP, c.dtype, c.device)

    def expected(self, c: Ctx, it: int) -> torch.Tensor | None:
        lo = c.rank * c.chunk
        return torch.cat([values(r, it, lo, c.chunk, OP, c.dtype, c.device) for r in range(c.n)])

    def call(self, c: Ctx, send: torch.Tensor, recv: torch.Tensor, op: dist.ReduceOp | None) -> None:
        dist.all_to_all_single(recv, send)
