"""all_to_all on single tensors: chunk j of rank i's input lands as chunk i on rank j."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from workloads.registry import Collective, Ctx, Span, register

if TYPE_CHECKING:
    import torch


@register
class AllToAll(Collective):
    name = "all_to_all"
    splits = True
    # The input is still being read while peers' chunks arrive: no in-place form.
    in_place_modes = (False,)

    @staticmethod
    def busbw_factor(n: int) -> float:
        return (n - 1) / n

    def inputs(self, c: Ctx) -> list[Span]:
        return [Span(0, c.count, c.rank)]

    def expected(self, c: Ctx) -> list[Span] | None:
        # chunk `rank` of every rank r's input, in rank order
        return [Span(r * c.chunk, c.chunk, r, c.rank * c.chunk) for r in range(c.n)]

    def bind(self, c: Ctx, send: torch.Tensor, recv: torch.Tensor, op: object) -> Callable[[], None]:
        import torch.distributed as dist

        return functools.partial(dist.all_to_all_single, recv, send)
