"""reduce to the root: the root ends with the reduction; other ranks' buffers are undefined."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from workloads.registry import ALL, Collective, Ctx, Span, register

if TYPE_CHECKING:
    import torch


@register
class Reduce(Collective):
    name = "reduce"
    finishes_together = False  # the root (or the receiver) waits; the others may leave early
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

    def bind(self, c: Ctx, send: torch.Tensor, recv: torch.Tensor, op: object) -> Callable[[], None]:
        import torch.distributed as dist

        return functools.partial(dist.reduce, recv, dst=c.root, op=op)
