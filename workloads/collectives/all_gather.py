"""all_gather into one tensor: msg_bytes is the full output (n chunks)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from workloads.data import values
from workloads.dtypes import NO_OP as OP
from workloads.registry import Collective, Ctx, register

_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


@register
class AllGather(Collective):
    name = "all_gather"
    splits = True

    @staticmethod
    def busbw_factor(n: int) -> float:
        return (n - 1) / n

    def send_numel(self, c: Ctx) -> int:
        return c.chunk

    def alias(self, c: Ctx, send: torch.Tensor, recv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return recv[c.rank * c.chunk : (c.rank + 1) * c.chunk], recv

    def inputs(self, c: Ctx, it: int) -> torch.Tensor:
        return values(c.rank, it, c.rank * c.chunk, c.chunk, OP, c.dtype, c.device)

    def expected(self, c: Ctx, it: int) -> torch.Tensor | None:
        return torch.cat([values(r, it, r * c.chunk, c.chunk, OP, c.dtype, c.device) for r in range(c.n)])

    def call(self, c: Ctx, send: torch.Tensor, recv: torch.Tensor, op: dist.ReduceOp | None) -> None:
        _all_gather(recv, send)
