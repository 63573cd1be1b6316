"""A training job's collectives as steps, from PyTorch's Flight Recorder dumps (read by
sweep.dumps): what `collbench replay` runs again and `collbench predict --trace` prices. Pure.

Steps: the op sequence of a rank repeats once per optimizer step; the step length is the period
of (group, collective, bytes) that separates ops by the largest pauses (the compute between steps),
counted back from the end (a first step that builds DDP's buckets differs from the rest). ops
before the first whole step are left out and said.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.errors import UsageError
from orchestrator.sweep.dumps import DTYPES, KINDS, Trace, TraceOp, dump_files, load, read_dump
from workloads.messages import ReplayOp, ReplayProgram

__all__ = ["DTYPES", "KINDS", "Steps", "Trace", "TraceOp", "dump_files", "find_steps", "load", "program", "read_dump"]


# -- steps --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Steps:
    period: int  # ops per step on the reference rank
    first: int  # index of the first op of the first whole step
    count: int  # whole steps in the trace
    how: str  # how the period was found, one line

    def span(self, k: int) -> tuple[int, int]:
        return self.first + k * self.period, self.first + (k + 1) * self.period


def find_steps(ops: Sequence[TraceOp], period: int | None = None) -> Steps:
    """The step structure of one rank's ops: `period` when given (--ops-per-step), else the
    shortest repeating unit of signatures whose boundaries fall on pauses (3x the median pause
    within a step or more); without such pauses, the shortest unit that repeats, from the start of
    its repeats."""
    n = len(ops)
    if n == 0:
        raise UsageError("the trace holds no collective on rank 0")
    if period is not None:
        if not 1 <= period <= n:
            raise UsageError(f"--ops-per-step {period}: rank 0 issued {n} collective(s)")
        region = _periodic_region([o.signature for o in ops], period)
        if region is not None:  # the steps are where the ops repeat with that period (set-up before them)
            lo, hi = region
            return Steps(period, lo, (hi - lo) // period, f"{period} op(s) per step (--ops-per-step), "
                                                           f"{(hi - lo) // period} steps repeating")
        return Steps(period, n % period, n // period, f"{period} op(s) per step (--ops-per-step), counted back "
                                                      "from the last op (they do not repeat alike)")
    sig = [o.signature for o in ops]
    gaps = [0.0] + [max(0.0, (b.created_ns - a.created_ns) / 1e3) for a, b in zip(ops, ops[1:])]
    plain = None  # the shortest repeating unit, without pauses
    for p in range(1, n // 2 + 1):
        region = _periodic_region(sig, p)
        if region is None:
            continue
        lo, hi = region  # sig[lo:hi] repeats with period p, over two units at least
        units = (hi - lo) // p
        if plain is None or units * p > plain.count * plain.period:  # the unit that covers most of the trace
            plain = Steps(p, lo, units, f"{p} op(s) repeat {units} times (no pause marks the steps; give "
                                        "--ops-per-step to say otherwise)")
        if p == 1:
            continue  # no pause within a one-op step to compare with
        best = None
        for first in range(lo, lo + p):  # where a step starts within the unit
            whole = (hi - first) // p
            if whole < 2:
                continue
            bounds = [gaps[first + k * p] for k in range(1, whole)]
            inner = [gaps[first + k * p + j] for k in range(whole) for j in range(1, p)]
            score = min(bounds) / max(_median(inner), 1.0)  # every boundary a pause, not most
            best = max(best or (score, first, whole), (score, first, whole))
        if best and best[0] >= 3.0:
            score, first, whole = best
            return Steps(p, first, whole, f"{p} op(s) per step, {whole} steps, each after a pause {score:.0f}x the "
                                          "median pause within a step or more")
    return plain or Steps(n, 0, 1, "no repeating unit: the whole trace as one step")


def _periodic_region(sig: list, p: int) -> tuple[int, int] | None:
    """The longest stretch [lo, hi) of `sig` that repeats with period p over two units or more
    (the latest of equal ones: set-up comes first), or None."""
    best, run_start = None, None
    for i in range(len(sig) - p + 1):
        same = i < len(sig) - p and sig[i] == sig[i + p]
        if same and run_start is None:
            run_start = i
        if not same and run_start is not None:
            length = i - run_start  # sig[run_start:i + p] is periodic
            if length >= p and (best is None or length >= best[1] - best[0] - p):
                best = (run_start, i + p)
            run_start = None
    return best


def _ranges(ranks: list[int]) -> str:
    return ",".join(map(str, ranks[:8])) + (f",... ({len(ranks)} ranks)" if len(ranks) > 8 else "")


def _median(values: list[float]) -> float:
    s = sorted(values)
    return s[len(s) // 2] if s else 0.0


# -- what the workers run -----------------------------------------------------------------
def program(trace: Trace, steps: Steps, *, gaps: bool) -> tuple[ReplayProgram, list[str]]:
    """Every rank's ops of the traced steps, as the workers replay them, and what was left out
    (one line each). A rank whose ops are rank 0's one for one (an SPMD job) has op i in the step
    of rank 0's op i; another rank's op is placed by when it was issued, against rank 0's step
    starts. Then each op (its group, sequence number and place among the ops sharing that number:
    a coalesced block) takes the step its lowest-ranked member gave it, on every member, and an op
    that some member lacks or left out is left out by all: every member replays it, in one step."""
    ref = trace.ops[0]
    end = steps.span(steps.count - 1)[1]
    bounds_ns = [ref[steps.span(k)[0]].created_ns for k in range(steps.count)]
    bounds_ns.append(ref[end].created_ns if end < len(ref) else math.inf)
    shape = [(o.name, o.in_numel, o.dtype) for o in ref]
    by_time = []  # ranks whose ops are not rank 0's in kind and size, one for one
    placed: dict[int, list[tuple[tuple, TraceOp, int | None]]] = {}  # rank -> (key, op, step or None)
    for rank in range(trace.world_size):
        ops = trace.ops.get(rank, ())
        alike = [(o.name, o.in_numel, o.dtype) for o in ops] == shape
        if not alike:
            by_time.append(rank)
        seen: dict[tuple, int] = {}
        placed[rank] = []
        for i, op in enumerate(ops):
            part = seen.get((op.group, op.seq), 0)
            seen[(op.group, op.seq)] = part + 1
            if alike:
                step = (i - steps.first) // steps.period if steps.first <= i < end else None
            elif bounds_ns[0] <= op.created_ns < bounds_ns[-1]:
                step = max(k for k in range(steps.count) if op.created_ns >= bounds_ns[k])
            else:
                step = None
            placed[rank].append(((op.group, op.seq, part), op, step))
    holders: dict[tuple, dict[int, int | None]] = {}
    for rank, items in placed.items():
        for key, _, step in items:
            holders.setdefault(key, {})[rank] = step
    agreed: dict[tuple, int] = {}
    for key, by_rank in holders.items():
        members = trace.groups.get(key[0], ())
        if all(by_rank.get(r) is not None for r in members):
            agreed[key] = by_rank[min(members)]
    skipped: dict[str, int] = {}
    unmatched = 0
    per_rank = []
    for rank in range(trace.world_size):
        kept = [(key, op, agreed[key]) for key, op, step in placed[rank] if key in agreed]
        unmatched += sum(1 for key, _, step in placed[rank] if step is not None and key not in agreed)
        starts: dict[int, int] = {}
        for _, op, step in kept:  # this rank's own start of each step: its own clock, for --gaps
            starts[step] = min(starts.get(step, op.created_ns), op.created_ns)
        rank_ops = []
        for (_, _, part), op, step in kept:
            if op.kind is None:
                skipped[op.name] = skipped.get(op.name, 0) + 1
                continue
            offset_us = (op.created_ns - starts[step]) / 1e3 if gaps else 0.0
            rank_ops.append(ReplayOp(step=step, seq=op.seq, group=op.group, kind=op.kind, dtype=op.dtype,
                                     in_numel=op.in_numel, out_numel=op.out_numel, msg_bytes=op.msg_bytes,
                                     offset_us=offset_us, traced_us=op.duration_us, part=part))
        per_rank.append(tuple(rank_ops))
    notes = [f"{n} {name} op(s) are not replayed (no collective to run for them)"
             for name, n in sorted(skipped.items())]
    before = steps.first
    if before:
        notes.append(f"{before} op(s) of rank 0 before the first whole step are left out (set-up, a first step "
                     "that differs)")
    if end < len(ref):
        notes.append(f"{len(ref) - end} op(s) of rank 0 after the last whole step are left out (a step cut short, "
                     "the job's closing barrier)")
    if unmatched:
        notes.append(f"{unmatched} op(s) that some member of their group did not record within the steps are left "
                     "out on every member (a ring buffer that kept less, ops issued across a step's start)")
    if by_time:
        notes.append(f"rank(s) {_ranges(by_time)} issued other ops than rank 0: their ops are placed in steps by the "
                     "time they were issued (clocks of different hosts must agree to well within a step)")
    groups = tuple((name, trace.group_label(name), ranks) for name, ranks in trace.groups.items())
    return ReplayProgram(world_size=trace.world_size, steps=steps.count, groups=groups, ops=tuple(per_rank),
                         gaps=gaps), notes
