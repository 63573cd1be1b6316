"""send_recv as a ring shift: every rank sends to rank+1 and receives from rank-1 at once."""

from __future__ import annotations

import torch
import torch.distributed as dist

from workloads.data import Span
from workloads.registry import Collective, Ctx, register


@register
class SendRecv(Collective):
    name = "send_recv"
    in_place_modes = (False,)
    min_ranks = 2

    @staticmethod
    def busbw_factor(n: int) -> float:
        return 1.0

    def inputs(self, c: Ctx) -> list[Span]:
        return [Span(0, c.count, c.rank)]

    def expected(self, c: Ctx) -> list[Span] | None:
        return [Span(0, c.count, (c.rank - 1) % c.n)]

    def call(self, c: Ctx, send: torch.Tensor, recv: torch.Tensor, op: dist.ReduceOp | None) -> None:
        ops = [
            dist.P2POp(dist.isend, send, (c.rank + 1) % c.n),
            dist.P2POp(dist.irecv, recv, (c.rank - 1) % c.n),
        ]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
