"""The collective interface and the one registry of collectives.

A collective module fills in one `Collective`: buffer sizes, inputs whose result is known, the
expected output, the bus-bandwidth factor and the call. The harness (`workloads.harness`) owns
every loop, timer and check; nothing here loops over sizes or iterations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Ctx:
    """One measurement's parameters as one rank sees them."""

    rank: int
    n: int  # ranks in the group
    count: int  # elements in the msg_bytes buffer (nccl-tests' count), already rounded
    dtype: str
    op: str
    root: int
    in_place: bool
    device: str = "cpu"

    @property
    def chunk(self) -> int:
        """Elements per rank for collectives that split the buffer into n parts."""
        return self.count // self.n


class Collective:
    """Base record; a collective module subclasses it and overrides what differs."""

    name: ClassVar[str]
    reduces: ClassVar[bool] = False  # takes an op (sum, max, ...)
    splits: ClassVar[bool] = False  # count must be a multiple of n (rounded down)
    in_place_modes: ClassVar[tuple[bool, ...]] = (False, True)
    min_ranks: ClassVar[int] = 1

    @staticmethod
    def busbw_factor(n: int) -> float:
        raise NotImplementedError

    def send_numel(self, c: Ctx) -> int:
        return c.count

    def recv_numel(self, c: Ctx) -> int:
        return c.count

    def alias(self, c: Ctx, send: torch.Tensor, recv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """In-place buffers: by default the send buffer is the receive buffer."""
        return send, send

    def inputs(self, c: Ctx, it: int) -> torch.Tensor:
        raise NotImplementedError

    def expected(self, c: Ctx, it: int) -> torch.Tensor | None:
        """The exact receive buffer on this rank, or None where it is undefined."""
        raise NotImplementedError

    def call(self, c: Ctx, send: torch.Tensor, recv: torch.Tensor, op: object) -> None:
        raise NotImplementedError


REGISTRY: dict[str, Collective] = {}


def register(cls: type[Collective]) -> type[Collective]:
    REGISTRY[cls.name] = cls()
    return cls


def round_count(collective: str, msg_bytes: int, elem_bytes: int, n: int) -> int:
    """Elements for a requested msg_bytes, rounded down to what the collective can split."""
    count = msg_bytes // elem_bytes
    if get(collective).splits:
        count -= count % n
    return count


def get(name: str) -> Collective:
    _load()
    return REGISTRY[name]


def names() -> list[str]:
    _load()
    return list(REGISTRY)


def _load() -> None:
    # Importing the modules registers them; the order here is the order of a sweep.
    from workloads.collectives import (  # noqa: F401
        all_gather,
        all_reduce,
        all_to_all,
        broadcast,
        reduce,
        reduce_scatter,
        send_recv,
    )
