"""all_gather into one tensor: msg_bytes is the full output (n chunks)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from workloads.registry import Collective, Ctx, Span, register

if TYPE_CHECKING:
    import torch


@register
class AllGather(Collective):
    name = "all_gather"
    splits = True

    def backend_numel(self, c: Ctx, backend: str) -> int:
        # torch's gloo backend goes through a temporary of the full buffer (measured on CPU:
        # tests/integration/test_memory.py); NCCL works in the caller's buffers.
        return c.count if backend == "gloo" else 0

    @staticmethod
    def busbw_factor(n: int) -> float:
        return (n - 1) / n

    def send_numel(self, c: Ctx) -> int:
        return c.chunk

    def alias(self, c: Ctx, send: torch.Tensor, recv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return recv[c.rank * c.chunk : (c.rank + 1) * c.chunk], recv

    def inputs(self, c: Ctx) -> list[Span]:
        return [Span(0, c.chunk, c.rank, c.rank * c.chunk)]

    def expected(self, c: Ctx) -> list[Span] | None:
        return [Span(r * c.chunk, c.chunk, r, r * c.chunk) for r in range(c.n)]

    def bind(self, c: Ctx, send: torch.Tensor, recv: torch.Tensor, op: object) -> Callable[[], None]:
        import torch.distributed as dist

        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return functools.partial(gather, recv, send)
