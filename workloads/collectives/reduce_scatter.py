"""reduce_scatter from one tensor: msg_bytes is the full input (n chunks)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from workloads.data import reduced, values
from workloads.registry import Collective, Ctx, register

_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


@register
class ReduceScatter(Collective):
    name = "reduce_scatter"
    reduces = True
    splits = True

    @staticmethod
    def busbw_factor(n: int) -> float:
        return (n - 1) / n

    def recv_numel(self, c: Ctx) -> int:
        return c.chunk

    def alias(self, c: Ctx, send: torch.Tensor, recv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return send, send[c.rank * c.chunk : (c.rank + 1) * c.chunk]

    def inputs(self, c: Ctx, it: int) -> torch.Tensor:
        return values(c.rank, it, 0, c.count, c.op, c.dtype, c.device)

    def expected(self, c: Ctx, it: int) -> torch.Tensor | None:
        return reduced(c.n, it, c.rank * c.chunk, c.chunk, c.op, c.dtype, c.device)

    def call(self, c: Ctx, send: torch.Tensor, recv: torch.Tensor, op: dist.ReduceOp | None) -> None:
        _reduce_scatter(recv, send, op=op)
