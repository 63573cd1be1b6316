"""reduce_scatter from one tensor: msg_bytes is the full input (n chunks)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from workloads.registry import ALL, Collective, Ctx, Span, register

if TYPE_CHECKING:
    import torch


@register
class ReduceScatter(Collective):
    name = "reduce_scatter"
    reduces = True
    splits = True

    def backend_numel(self, c: Ctx, backend: str) -> int:
        # torch's gloo backend goes through a temporary of the full buffer (measured on CPU:
        # tests/integration/test_memory.py); NCCL works in the caller's buffers.
        return c.count if backend == "gloo" else 0

    @staticmethod
    def busbw_factor(n: int) -> float:
        return (n - 1) / n

    def recv_numel(self, c: Ctx) -> int:
        return c.chunk

    def alias(self, c: Ctx, send: torch.Tensor, recv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return send, send[c.rank * c.chunk : (c.rank + 1) * c.chunk]

    def inputs(self, c: Ctx) -> list[Span]:
        return [Span(0, c.count, c.rank)]

    def expected(self, c: Ctx) -> list[Span] | None:
        return [Span(0, c.chunk, ALL, c.rank * c.chunk)]

    def bind(self, c: Ctx, send: torch.Tensor, recv: torch.Tensor, op: object) -> Callable[[], None]:
        import torch.distributed as dist

        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return functools.partial(scatter, recv, send, op=op)
