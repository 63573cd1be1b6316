"""all_to_all with uneven splits (all-to-all-v, as mixture-of-experts routing sends): rank i sends
rank j the cell [i][j] of the case's traffic matrix (workloads.traffic), scaled so that the busiest
rank moves `count` elements; what rank j receives from i lands at i's place in j's buffer."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from workloads import traffic
from workloads.registry import Collective, Ctx, Span, register

if TYPE_CHECKING:
    import torch


def matrix(c: Ctx) -> traffic.Matrix:
    """The case's matrix, or nccl-tests' generated pattern for a group of c.n ranks."""
    return c.traffic if c.traffic is not None else traffic.generated(c.n)


@register
class AllToAllV(Collective):
    name = "all_to_allv"
    in_place_modes = (False,)  # as all_to_all: the input is read while peers' chunks arrive
    finishes_together = False  # a rank with few bytes leaves early: a short own time is no lateness

    @staticmethod
    def busbw_factor(n: int) -> float:
        return (n - 1) / n

    def send_numel(self, c: Ctx) -> int:
        return sum(traffic.send_counts(matrix(c), c.count, c.rank))

    def recv_numel(self, c: Ctx) -> int:
        return sum(traffic.recv_counts(matrix(c), c.count, c.rank))

    def inputs(self, c: Ctx) -> list[Span]:
        return [Span(0, self.send_numel(c), c.rank)]

    def expected(self, c: Ctx) -> list[Span] | None:
        # the chunk rank r addressed to this rank: where it starts in r's input, in r's order
        m = matrix(c)
        got = traffic.recv_counts(m, c.count, c.rank)
        at = traffic.offsets(got)
        spans = []
        for r in range(c.n):
            if got[r]:
                start = traffic.offsets(traffic.send_counts(m, c.count, r))[c.rank]
                spans.append(Span(at[r], got[r], r, start))
        return spans

    def bind(self, c: Ctx, send: torch.Tensor, recv: torch.Tensor, op: object) -> Callable[[], None]:
        import torch.distributed as dist

        m = matrix(c)
        return functools.partial(dist.all_to_all_single, recv, send,
                                 output_split_sizes=list(traffic.recv_counts(m, c.count, c.rank)),
                                 input_split_sizes=list(traffic.send_counts(m, c.count, c.rank)))
