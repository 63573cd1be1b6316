"""all_reduce: every rank ends with the reduction of all ranks' buffers."""

import torch.distributed as dist

from workloads.data import reduced, values
from workloads.registry import Collective, Ctx, register


@register
class AllReduce(Collective):
    name = "all_reduce"
    reduces = True
    # torch.distributed.all_reduce has no out-of-place form.
    in_place_modes = (True,)

    @staticmethod
    def busbw_factor(n):
        return 2 * (n - 1) / n

    def inputs(self, c: Ctx, it):
        return values(c.rank, it, 0, c.count, c.op, c.dtype, c.device)

    def expected(self, c: Ctx, it):
        return reduced(c.n, it, 0, c.count, c.op, c.dtype, c.device)

    def call(self, c, send, recv, op):
        dist.all_reduce(recv, op=op)
