"""The collective interface and the one registry of workloads.

A collective module fills in one `Collective`: buffer sizes, inputs whose result is known and the
expected output (both as `Span`s: which rank's data lies where), the
bus-bandwidth factor and the call, bound to one size's buffers. The harness (`workloads.harness`) owns
every loop, timer and check; nothing here loops over sizes or iterations.

Neither this module nor the collective modules import torch at import time (a collective's call
imports torch.distributed when it runs), so the driver and the analysis commands read names,
sizes and bus-bandwidth factors without a device library.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    import torch

# The collectives, in the order a sweep runs them; each is `workloads.collectives.<name>`.
COLLECTIVES: tuple[str, ...] = (
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "all_to_allv", "broadcast", "reduce", "send_recv",
)
# A matmul and all_reduce alone and together on the same group (`workloads.overlap`).
OVERLAP = "overlap"
WORKLOADS: tuple[str, ...] = (*COLLECTIVES, OVERLAP)  # what a sweep's --collectives may name
# A traced job's steps (`workloads.replay`, `collbench replay`): a workload, not a sweep's choice.
REPLAY = "replay"
RUNNERS: tuple[str, ...] = (OVERLAP, REPLAY)  # the workloads with their own run (registered below)


# The reduction over every rank of the group, as a Span source.
ALL = -1


@dataclass(frozen=True)
class Span:
    """Buffer elements [at, at + numel) hold `source`'s values for global element indices
    [start, start + numel); `source` is a rank, or ALL (the reduction over every rank).
    workloads.data writes and checks buffers from these."""

    at: int
    numel: int
    source: int
    start: int = 0


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
    traffic: tuple[tuple[int, ...], ...] | None = None  # all_to_allv: its matrix (workloads.traffic)

    @property
    def chunk(self) -> int:
        """Elements per rank for collectives that split the buffer into n parts."""
        return self.count // self.n


class Collective(ABC):
    """Base record; a collective module subclasses it and overrides what differs."""

    name: ClassVar[str]
    reduces: ClassVar[bool] = False  # takes an op (sum, max, ...)
    splits: ClassVar[bool] = False  # count must be a multiple of n (rounded down)
    in_place_modes: ClassVar[tuple[bool, ...]] = (False, True)
    min_ranks: ClassVar[int] = 1
    # every member waits for every other and all finish at about the same moment, so a rank that
    # arrives late shows as the member with the shortest own time (analysis.stragglers); not so for
    # a rooted or one-way collective (broadcast, reduce, send_recv), where the root or the receiver waits
    finishes_together: ClassVar[bool] = True

    @staticmethod
    @abstractmethod
    def busbw_factor(n: int) -> float:
        """nccl-tests' bus-bandwidth factor for n ranks (docs/concepts/bandwidth.md)."""

    def send_numel(self, c: Ctx) -> int:
        return c.count

    def recv_numel(self, c: Ctx) -> int:
        return c.count

    def buffer_numel(self, c: Ctx) -> int:
        """Elements of one size's buffers: send and receive, or the one buffer in place."""
        send, recv = self.send_numel(c), self.recv_numel(c)
        return max(send, recv) if c.in_place else send + recv

    def backend_numel(self, c: Ctx, backend: str) -> int:
        """Elements the backend's own implementation of the call allocates (measured)."""
        return 0

    def alias(self, c: Ctx, send: torch.Tensor, recv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """In-place buffers: by default the send buffer is the receive buffer."""
        return send, send

    @abstractmethod
    def inputs(self, c: Ctx) -> list[Span]:
        """What this rank's send buffer holds (workloads.data writes it for each iteration)."""

    @abstractmethod
    def expected(self, c: Ctx) -> list[Span] | None:
        """What this rank's receive buffer must hold afterwards, or None where it is undefined."""

    @abstractmethod
    def bind(self, c: Ctx, send: torch.Tensor, recv: torch.Tensor, op: object) -> Callable[[], None]:
        """One blocking call of the collective on these buffers, ready to be timed (bound once
        per size, so the timed region holds the call and nothing else)."""


REGISTRY: dict[str, Collective] = {}


@dataclass(frozen=True)
class Workload:
    """A workload other than one plain collective (overlap, replay): its own run of a case on one
    rank, made of the harness' steps. Its module (`workloads.<name>`) registers it; the harness finds
    it here by name, so the harness never imports a workload that imports the harness, and neither
    the harness nor the worker branches on a case's kind."""

    name: str
    run: Callable[..., list]  # (case, rank, world size, device) -> this rank's samples or timings


WORKLOAD_REGISTRY: dict[str, Workload] = {}


def register(cls: type[Collective]) -> type[Collective]:
    """Class decorator: one instance per collective, under its name (which must be listed)."""
    if cls.name not in COLLECTIVES:
        raise ValueError(f"collective {cls.name!r} is not in registry.COLLECTIVES")
    REGISTRY[cls.name] = cls()
    return cls


def register_workload(workload: Workload) -> Workload:
    if workload.name not in RUNNERS:
        raise ValueError(f"workload {workload.name!r} is not one of registry.RUNNERS")
    WORKLOAD_REGISTRY[workload.name] = workload
    return workload


def workload(name: str) -> Workload | None:
    """The registered record of a workload that is not a plain collective (loaded on first use:
    it imports torch); None for a collective, which the harness measures itself."""
    if name in COLLECTIVES:
        return None
    if name not in WORKLOAD_REGISTRY:
        importlib.import_module(f"workloads.{name}")
    return WORKLOAD_REGISTRY[name]


def round_count(collective: str, msg_bytes: int, elem_bytes: int, n: int) -> int:
    """Elements for a requested msg_bytes, rounded down to what the collective can split."""
    count = msg_bytes // elem_bytes
    if get(collective).splits:
        count -= count % n
    return count


def get(name: str) -> Collective:
    _load()
    return REGISTRY[name]


def collective_of(workload: str) -> Collective:
    """The collective a workload measures: itself, or all_reduce for overlap."""
    return get("all_reduce" if workload == OVERLAP else workload)


def names() -> list[str]:
    return list(COLLECTIVES)


def _load() -> None:
    if len(REGISTRY) < len(COLLECTIVES):
        for name in COLLECTIVES:
            importlib.import_module(f"workloads.collectives.{name}")
