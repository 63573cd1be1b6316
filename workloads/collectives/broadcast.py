"""broadcast from the root: every rank ends with the root's buffer."""

import torch.distributed as dist

from workloads.data import values
from workloads.dtypes import NO_OP as OP
from workloads.registry import Collective, Ctx, register


@register
class Broadcast(Collective):
    name = "broadcast"
    # torch.distributed.broadcast works on one buffer.
    in_place_modes = (True,)

    @staticmethod
    def busbw_factor(n):
        return 1.0

    def inputs(self, c: Ctx, it):
        # Every rank starts with its own data, so a rank that missed the root's is caught.
        return values(c.rank, it, 0, c.count, OP, c.dtype, c.device)

    def expected(self, c: Ctx, it):
        return values(c.root, it, 0, c.count, OP, c.dtype, c.device)

    def call(self, c, send, recv, op):
        dist.broadcast(recv, src=c.root)
