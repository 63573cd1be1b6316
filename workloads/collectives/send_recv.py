"""send_recv as a ring shift: every rank sends to rank+1 and receives from rank-1 at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from workloads.registry import Collective, Ctx, Span, register

if TYPE_CHECKING:
    import torch


@register
class SendRecv(Collective):
    name = "send_recv"
    finishes_together = False  # the root (or the receiver) waits; the others may leave early
    in_place_modes = (False,)
    min_ranks = 2

    @staticmethod
    def busbw_factor(n: int) -> float:
        return 1.0

    def inputs(self, c: Ctx) -> list[Span]:
        return [Span(0, c.count, c.rank)]

    def expected(self, c: Ctx) -> list[Span] | None:
        return [Span(0, c.count, (c.rank - 1) % c.n)]

    def bind(self, c: Ctx, send: torch.Tensor, recv: torch.Tensor, op: object) -> Callable[[], None]:
        import torch.distributed as dist

        ops = [
            dist.P2POp(dist.isend, send, (c.rank + 1) % c.n),
            dist.P2POp(dist.irecv, recv, (c.rank - 1) % c.n),
        ]

        def shift() -> None:
            for req in dist.batch_isend_irecv(ops):
                req.wait()

        return shift
