"""all_reduce: every rank ends with the reduction of all ranks' buffers."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from workloads.registry import ALL, Collective, Ctx, Span, register

if TYPE_CHECKING:
    import torch


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

    def bind(self, c: Ctx, send: torch.Tensor, recv: torch.Tensor, op: object) -> Callable[[], None]:
        import torch.distributed as dist

        return functools.partial(dist.all_reduce, recv, op=op)
