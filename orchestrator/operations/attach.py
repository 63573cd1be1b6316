"""`collbench attach` and `api.attach`: a job's Flight Recorder dumps read (as the job writes them:
on a timeout, or TORCH_FR_DUMP_TEMP_FILE), judged for a hang and for chronic stragglers
(analysis.attach), each rank named with its host where the caller says where ranks ran. Reads
files only: no Ray, no torch, nothing sent to the job.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from orchestrator.analysis.attach import Attached, judge
from orchestrator.errors import UsageError
from orchestrator.operations.import_ import check_hosts, hosts_per_rank
from orchestrator.sweep.dumps import load
from orchestrator.sweep.units import parse_duration

FR_SETTINGS = ("TORCH_FR_BUFFER_SIZE=2000 (records per rank), TORCH_FR_DUMP_TEMP_FILE=/shared/fr/rank_ (where each "
               "rank writes its dump on a timeout), and for NCCL TORCH_NCCL_ENABLE_TIMING=1 (completion times: "
               "clocks aligned)")


@dataclass(frozen=True)
class AttachOptions:
    paths: tuple[str, ...]
    hang_after: str | float = "30s"  # a duration (30s, 5m) or seconds
    min_late_ms: float = 5.0
    hosts: tuple[str, ...] = ()
    every: str | float | None = None  # look again this often (None: once)
    for_: str | float = "1h"  # with `every`, stop after this long

    def __post_init__(self) -> None:
        if not self.paths:
            raise UsageError("attach: name the folder (or files) where the job's Flight Recorder dumps land")
        if isinstance(self.min_late_ms, bool) or not isinstance(self.min_late_ms, (int, float)) \
                or not self.min_late_ms > 0:
            shown = f"{self.min_late_ms:g}" if isinstance(self.min_late_ms, (int, float)) else repr(self.min_late_ms)
            raise UsageError(f"--min-late {shown}: a time above zero, in ms")
        check_hosts(self.hosts)
        for value, option in ((self.hang_after, "--hang-after"), (self.every, "--every"), (self.for_, "--for")):
            if value is not None:
                parse_duration(value, option)

    @property
    def hang_after_s(self) -> float:
        return parse_duration(self.hang_after, "--hang-after")


@dataclass(frozen=True)
class Look:
    """One look at the dumps: the verdicts, each rank's host where known, and what reading cost."""

    attached: Attached
    hosts: tuple[str, ...]  # by rank; () where not given
    read_s: float
    dumps: int
    waiting: str | None = None  # with --every: why nothing could be read yet (no dump, one half-written)

    def where(self, rank: int) -> str:
        return f"rank {rank}" + (f" on {self.hosts[rank]}" if rank < len(self.hosts) else "")


def looks(options: AttachOptions) -> Iterator[Look]:
    """One look, or with `every` one each period until something is named or `for_` has passed."""
    until = time.monotonic() + parse_duration(options.for_, "--for")
    every = parse_duration(options.every, "--every") if options.every is not None else None
    while True:
        try:
            look = attach(options)
        except UsageError as e:  # looking again: the job may not have written (all of) its dumps yet
            if every is None or time.monotonic() + every > until:
                raise
            look = Look(Attached(0, 0, None, (), "", ()), (), 0.0, 0, str(e))
        yield look
        if look.attached.named or every is None or time.monotonic() + every > until:
            return
        time.sleep(every)


def attach(options: AttachOptions) -> Look:
    t0 = time.monotonic()
    trace = load(list(options.paths), every_rank=False)
    attached = judge(trace, options.hang_after_s, options.min_late_ms)
    hosts = tuple(hosts_per_rank(list(options.hosts), trace.world_size, f"the {trace.world_size} ranks of the dumps")
                  ) if options.hosts else ()
    limits = attached.limits if hosts else (*attached.limits, "hosts: a dump does not say where its rank ran; name "
                                            "them with --hosts (one per rank, or one per node)")
    return Look(Attached(attached.ranks, attached.collectives, attached.hang, attached.stragglers, attached.clocks,
                         limits), hosts, time.monotonic() - t0, len(trace.sources))
