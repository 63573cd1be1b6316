"""broadcast from the root: every rank ends with the root's buffer."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from workloads.registry import Collective, Ctx, Span, register

if TYPE_CHECKING:
    import torch


@register
class Broadcast(Collective):
    name = "broadcast"
    finishes_together = False  # the root (or the receiver) waits; the others may leave early
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

    def bind(self, c: Ctx, send: torch.Tensor, recv: torch.Tensor, op: object) -> Callable[[], None]:
        import torch.distributed as dist

        return functools.partial(dist.broadcast, recv, src=c.root)
