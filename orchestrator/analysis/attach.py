"""`collbench attach`: which rank a running job's other ranks wait for, from its Flight Recorder
dumps (sweep.dumps). Pure: the records in, two verdicts out.

- **hang**: in a process group, the collective some ranks entered and others never reached, as
  PyTorch's Flight Recorder analyser reasons: each rank's last enqueued collective of the group
  (its records, else its pg_status); the ranks behind the others did not arrive at the first
  collective they lack, and the others have waited in it since they entered it (to the time their
  dump was written). A gap younger than `hang_after_s` is a job in flight, not a hang.
- **chronic straggler**: under data parallelism every rank's collective takes as long as the last
  rank's lateness, so durations hide the culprit (it is the one whose collectives look fastest);
  the signal is arrival: when each rank enqueued each collective. A rank that arrives after the
  others' median far more often than chance (a sign test at one half, FAMILY_ALPHA over the ranks)
  and by a median of at least `min_late_ms` is named (two slow ranks at once are each named; in a
  group of 64 a rank 10 ms late is named though others' spikes make it last only now and then),
  with how often it was last and what it alone cost: its margin over the next-to-last rank when
  it was last, summed over the records' span.

Clocks: where the dumps hold completion times (NCCL with TORCH_NCCL_ENABLE_TIMING=1) each rank's
clock is aligned to its groups' common completions (a collective ends on every rank at once);
else they are taken as synchronized (one host, or NTP: a few ms at worst), which `min_late_ms`
must exceed, and the result says so.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass

from orchestrator.judging.stats import FAMILY_ALPHA, binomial_tail
from orchestrator.sweep.dumps import Trace, TraceOp

MIN_JUDGED = 10  # collectives a rank must be judged in before it can be named a straggler


@dataclass(frozen=True)
class Hang:
    group: str
    seq: int  # the collective's sequence number in its group
    op: str
    msg_bytes: int
    entered: tuple[int, ...]  # ranks that entered it and wait
    missing: tuple[int, ...]  # ranks that never reached it
    waited_s: float  # how long the ranks that entered it had waited when they dumped (the least of them)

    def line(self) -> str:
        return (f"hang: rank(s) {_ranks(self.missing)} never reached collective {self.seq} of group {self.group} "
                f"({self.op}, {self.msg_bytes} bytes); rank(s) {_ranks(self.entered)} have waited in it "
                f"{self.waited_s:.1f} s")


@dataclass(frozen=True)
class Straggler:
    rank: int
    op: str  # the collective it is late to: "all_reduce of 65536 bytes in group 0"
    last: int  # collectives it arrived last in
    judged: int  # collectives it was judged in
    expected: float  # times last by chance alone
    p_value: float
    late_ms: float  # median margin behind the others' median arrival
    cost_share: float  # the wait it alone caused (behind the next-to-last rank), over the records' span

    def line(self) -> str:
        return (f"straggler: rank {self.rank} arrives a median {self.late_ms:.1f} ms after the others at "
                f"{self.op}, last in {self.last} of {self.judged} ({self.expected:.1f} by chance): waiting for it "
                f"alone took {self.cost_share:.0%} of the job's time")


@dataclass(frozen=True)
class Attached:
    ranks: int
    collectives: int  # (group, seq) records seen
    hang: Hang | None
    stragglers: tuple[Straggler, ...]
    clocks: str  # how the ranks' clocks were put on one time line
    limits: tuple[str, ...]  # what it could not see, one line each

    @property
    def named(self) -> bool:
        return self.hang is not None or bool(self.stragglers)


def judge(trace: Trace, hang_after_s: float = 30.0, min_late_ms: float = 5.0) -> Attached:
    limits = []
    trace = _collectives(trace)
    missing_dumps = sorted(set(range(trace.world_size)) - set(trace.ops))
    if missing_dumps:
        limits.append(f"rank(s) {_ranks(missing_dumps)}: no dump (a rank that died, or whose dump was not written): "
                      "the collectives of its groups cannot be judged, for a hang nor for stragglers (the highest "
                      "rank's absence cannot be seen: ranks are counted from the dumps' names)")
    if trace.dumped_ns:
        limits.append("waits are measured to each dump's file time: a dump copied without its time reads older "
                      "waits than it had")
    hang = find_hang(trace, hang_after_s)
    arrivals, clocks = _arrivals(trace)
    stragglers, judged = find_stragglers(trace, arrivals, min_late_ms)
    if judged < MIN_JUDGED:
        limits.append(f"{judged} collective(s) held by every rank of their group: too few to judge stragglers "
                      f"(at least {MIN_JUDGED})")
    if not any(o.created_ns for ops in trace.ops.values() for o in ops):
        limits.append("no issue times in the records: stragglers cannot be judged")
    return Attached(trace.world_size, len({(o.group, o.seq) for ops in trace.ops.values() for o in ops}), hang,
                    tuple(stragglers), clocks, tuple(limits))


def _collectives(trace: Trace) -> Trace:
    """The records of collectives only: a send or recv carries the last collective's sequence number."""
    return dataclasses.replace(trace, ops={r: tuple(o for o in ops if not o.p2p) for r, ops in trace.ops.items()})


def _last_seq(trace: Trace, rank: int, group: str) -> int:
    """The last collective of `group` the rank enqueued: its records', else its pg_status'."""
    seqs = [o.seq for o in trace.ops.get(rank, ()) if o.group == group]
    status = (trace.status.get(rank) or {}).get(group) or {}
    return max([*seqs, int(status.get("last_enqueued_collective") or 0)])


def find_hang(trace: Trace, hang_after_s: float) -> Hang | None:
    """The oldest collective some ranks of its group entered and others never reached."""
    found = []
    for group, members in trace.groups.items():
        if len(members) < 2:
            continue
        last = {r: _last_seq(trace, r, group) if r in trace.ops else -1 for r in members}
        top = max(last.values())
        behind = [r for r in members if last[r] < top]
        if not behind:
            continue
        seq = min(last[r] for r in behind) + 1
        entered = [r for r in members if last[r] >= seq]
        ops = [o for r in entered for o in trace.ops[r] if o.group == group and o.seq == seq]
        if not ops:
            continue
        waited = min((trace.dumped_ns.get(o.rank, o.created_ns) - o.created_ns) / 1e9 for o in ops)
        if waited >= hang_after_s:
            found.append(Hang(group, seq, ops[0].name, ops[0].msg_bytes, tuple(entered),
                              tuple(r for r in behind if last[r] < seq), waited))
    return max(found, key=lambda h: h.waited_s, default=None)


def _arrivals(trace: Trace) -> tuple[dict[tuple[str, int], dict[int, float]], str]:
    """(group, seq) -> rank -> when it issued it (ms, on one time line), and how the clocks were
    aligned: by the groups' common completions where every rank's records have them."""
    offsets = {r: 0.0 for r in trace.ops}
    done: dict[tuple[str, int], dict[int, int]] = {}
    for ops in trace.ops.values():
        for o in ops:
            if o.completed_ns:
                done.setdefault((o.group, o.seq), {})[o.rank] = o.completed_ns
    common = [by for by in done.values() if len(by) > 1]
    aligned = [r for r in trace.ops if sum(r in by for by in common) >= MIN_JUDGED]
    clocks = "taken as synchronized: no completion times in the dumps (gloo, or NCCL without " \
             "TORCH_NCCL_ENABLE_TIMING=1); a margin under a few ms could be the clocks'"
    if aligned and len(aligned) == len(trace.ops):
        for r in aligned:
            offsets[r] = statistics.median((by[r] - statistics.median(by.values())) / 1e6 for by in common if r in by)
        clocks = f"aligned to the groups' common completions ({len(common)} collectives)"
    out: dict[tuple[str, int], dict[int, float]] = {}
    for ops in trace.ops.values():
        for o in ops:
            if o.created_ns:
                out.setdefault((o.group, o.seq), {})[o.rank] = o.created_ns / 1e6 - offsets[o.rank]
    return out, clocks


def _kinds(trace: Trace) -> dict[tuple[str, int], str]:
    """(group, seq) -> the collective in words, alike for every call of it (name, bytes, group)."""
    return {(o.group, o.seq): f"{o.name} of {o.msg_bytes} bytes in group {trace.group_label(o.group)}"
            for ops in trace.ops.values() for o in ops}


def find_stragglers(trace: Trace, arrivals: dict[tuple[str, int], dict[int, float]], min_late_ms: float,
                    ) -> tuple[list[Straggler], int]:
    """Ranks that arrive after the rest of their group far more often than chance (a sign test
    at one half, FAMILY_ALPHA over every rank and collective), by a median of at least
    `min_late_ms` behind the others' median arrival, each collective (name, bytes, group) judged
    on its own calls (a slow data loader delays the first collective of a step, not the others);
    and how many collectives were judged (held by every rank of their group, two or more). A clock
    off by less than `min_late_ms` moves a rank's median by that much: not enough to name it."""
    kinds = _kinds(trace)
    behind: dict[tuple[int, str], list[float]] = {}  # (rank, collective) -> its arrival minus the others' median
    last: dict[tuple[int, str], list[float]] = {}  # (rank, collective) -> its margin over the next-to-last, if last
    expected: dict[tuple[int, str], float] = {}
    n_judged = 0
    times = [t for by in arrivals.values() for t in by.values()]
    for key, by in arrivals.items():
        members = trace.groups.get(key[0], ())
        if len(members) < 2 or set(by) != set(members):
            continue
        n_judged += 1
        order = sorted(by, key=by.get)
        last.setdefault((order[-1], kinds[key]), []).append(by[order[-1]] - by[order[-2]])
        times_sorted = [by[r] for r in order]
        for i, r in enumerate(order):
            behind.setdefault((r, kinds[key]), []).append(by[r] - _median_without(times_sorted, i))
            expected[r, kinds[key]] = expected.get((r, kinds[key]), 0.0) + 1 / len(members)
    span_ms = (max(times) - min(times)) if times else 0.0
    found: dict[int, Straggler] = {}
    for (r, kind), margins in behind.items():
        m, later = len(margins), sum(d > 0 for d in margins)
        p = binomial_tail(later, m, 0.5)
        late = statistics.median(margins)
        if m >= MIN_JUDGED and p < FAMILY_ALPHA / max(len(behind), 1) and late >= min_late_ms:
            mine = last.get((r, kind), [])
            s = Straggler(r, kind, len(mine), m, expected[r, kind], p, late, sum(mine) / span_ms if span_ms else 0.0)
            if r not in found or s.late_ms > found[r].late_ms:  # a rank once, at the collective it is latest to
                found[r] = s
    return sorted(found.values(), key=lambda s: -s.late_ms), n_judged


def _median_without(values: list[float], i: int) -> float:
    """The median of sorted `values` without the one at index i (no copy: O(1))."""
    n = len(values) - 1

    def at(k: int) -> float:  # the k-th of the n values left
        return values[k + (k >= i)]

    return at(n // 2) if n % 2 else (at(n // 2 - 1) + at(n // 2)) / 2


def _ranks(ranks) -> str:
    return ",".join(map(str, ranks))


__all__ = ["Attached", "Hang", "Straggler", "TraceOp", "judge"]
