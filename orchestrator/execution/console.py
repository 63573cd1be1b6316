"""What a run prints while it goes: group headers, result rows, failures, progress, the end.

`Console` is an observer of the runner (`execution.events`); the line formats are plain functions
so that tests and other observers can reuse them.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from orchestrator.execution.events import (
    GroupEnded,
    GroupFailure,
    GroupStarted,
    Measuring,
    Note,
    RowsMeasured,
    RunObserver,
)
from orchestrator.execution.live import LiveLine, Work
from orchestrator.sweep.planner import Group
from orchestrator.sweep.sizes import format_bytes
from workloads.messages import Status

_COLUMNS = (
    ("collective", 14, "s"),
    ("dtype", 11, "s"),
    ("op", 4, "s"),
    ("place", 5, "s"),
    ("msg_bytes", 9, "s"),
    ("count", 11, "d"),
    ("time_us", 11, ".1f"),
    ("algbw", 8, ".3f"),
    ("busbw", 8, ".3f"),
    ("#wrong", 7, "d"),
)


def header() -> str:
    return "  " + " ".join(f"{name:>{w}}" if f != "s" else f"{name:<{w}}" for name, w, f in _COLUMNS)


def row_line(row: dict) -> str:
    if row["status"] != Status.OK.value:
        return (
            f"  {row['collective']:<14} {row['dtype']:<11} {row['op']:<4} {_place(row):<5} "
            f"{format_bytes(row['msg_bytes']):<9} {row['status'].upper()}: {row.get('error') or ''}"
        )
    if row.get("step") is not None:  # a replayed op: where it is in the job, its time
        bw = f" busbw {row['busbw_gbps']:.3f} GB/s" if row.get("busbw_gbps") is not None else ""
        return (f"  step {row['step']:<3} {row['process_group']:<12} seq {row['seq']:<5} {row['collective']:<14} "
                f"{row['dtype']:<9} {format_bytes(row['msg_bytes']):<9} {row['world_size']:>3} rank(s) "
                f"{_place(row):<5} "
                f"{row['time_us']:>11.1f} us{bw}")
    values = (
        row["collective"],
        row["dtype"],
        row["op"],
        _place(row),
        format_bytes(row["msg_bytes"]),
        row["count"],
        row["time_us"],
        row["algbw_gbps"],
        row["busbw_gbps"],
        row["n_wrong"],
    )
    line = "  " + " ".join(f"{v:<{w}{f}}" if f == "s" else f"{v:>{w}{f}}" for v, (_, w, f) in zip(values, _COLUMNS))
    if row.get("t_step_us") is not None:
        line += (
            f"  comp {row['t_comp_us']:.1f} step {row['t_step_us']:.1f} overlap {row['t_overlap_us']:.1f} us "
            f"({row['overlap_efficiency']:.0%})"
        )
    return line


def _place(row: dict) -> str:
    return "in" if row["in_place"] else "out"


def group_line(group: Group, base: dict) -> str:
    nodes = ", ".join(dict.fromkeys(f"{h} {ip}" for h, ip in zip(base["hosts"], base["node_ips"])))
    return (
        f"# group {group.group_id} ({group.pattern}, {base['topology']}): {base['world_size']} ranks on "
        f"{base['n_nodes']} node(s) [{nodes}], round {group.round}, {base['groups_in_round']} group(s) in round"
    )


def failure_summary(failures: list[GroupFailure]) -> list[str]:
    """One line per distinct error: `[ranks 0,1,3 on node-b] timeout: ... (groups r0-g1, r2-g0)`."""
    by_error: dict[tuple[str, str], list[GroupFailure]] = {}
    for f in failures:
        by_error.setdefault((f.status.value, f.error), []).append(f)
    lines = []
    for (status, error), items in by_error.items():
        ranks = sorted({r for f in items for r in f.ranks})
        hosts = sorted({h for f in items for h in f.hosts})
        groups = ", ".join(dict.fromkeys(f.group_id for f in items))
        lines.append(
            f"[ranks {','.join(map(str, ranks))} on {', '.join(hosts)}] {status}: {error} (groups {groups})"
        )
    return lines


class Console(RunObserver):
    """Prints the run as it goes: group lines, a column header once per round, a line per row
    (`rows=False`: none of these) and per failure on stdout; progress (groups done, elapsed, and
    an estimate where the total is known) on stderr at each group's end, and with `work` (the plan's
    cases and their estimate, execution.live) a live line: redrawn in place on a terminal, a plain
    line now and then in a pipe or a job log. `close()` ends it."""

    def __init__(self, total_groups: int | None, out: TextIO | None = None, progress: TextIO | None = None,
                 rows: bool = True, work: Work | None = None, terminal: bool | None = None,
                 ends: bool = True) -> None:
        """`ends`: a progress line at each group's end (False: the live line alone says it)."""
        self.total = total_groups
        self.done = 0
        self.t0 = time.monotonic()
        # Resolved now, not at import: the CLI replaces sys.stdout (a reader that leaves early).
        self.out = out or sys.stdout
        self.progress = progress or sys.stderr
        self.rows, self.ends = rows, ends
        self.live = None
        if work is not None:
            if terminal is None:
                terminal = is_terminal(self.progress)
            self.live = LiveLine(work, self._write_progress, terminal)  # drawn from the first group on

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    def begin(self, work: Work, label: str = "", unit: str = "groups", terminal: bool | None = None) -> None:
        """A live line for one piece of work from now on (qualify: each round, whose probes are known
        only when it starts), drawn at once; `close()` ends it before the next piece's lines."""
        self.close()
        if terminal is None:
            terminal = is_terminal(self.progress)
        self.live = LiveLine(work, self._write_progress, terminal, label=label, unit=unit)
        self.live.start()

    def group_started(self, event: GroupStarted) -> None:
        if self.live is not None and not self.live.started:  # after the start-up's own lines
            self.live.start()
        if self.rows:
            self._print(group_line(event.group, event.base))

    def measuring(self, event: Measuring) -> None:
        if self.rows:
            self._print(header())

    def note(self, event: Note) -> None:
        self._print(event.text)

    def rows_measured(self, event: RowsMeasured) -> None:
        if self.live is not None:
            with self.live.lock:
                work = self.live.work
                work.done_cases[event.group.group_id] = work.done_cases.get(event.group.group_id, 0) + 1
        for row in event.rows if self.rows else ():
            self._print(row_line(row))

    def group_ended(self, event: GroupEnded) -> None:
        if event.failure is not None:
            self._print(f"  {event.status.value.upper()}: group {event.group.group_id}: {event.failure.error}")
        self.done += 1
        elapsed = time.monotonic() - self.t0
        if self.live is not None:
            with self.live.lock:
                self.live.work.ended.add(event.group.group_id)
        if not self.ends:
            if self.live is not None:
                self.live.draw()  # the group's end shown now, not at the next tick
            return
        if self.total is None:
            line = f"[progress] {self.done} groups done, {elapsed:.0f}s elapsed"
        else:
            left = self.live.work.left_s(elapsed) if self.live is not None else \
                elapsed / self.done * (self.total - self.done)
            line = f"[progress] {self.done}/{self.total} groups done, {elapsed:.0f}s elapsed" + (
                f", ~{left:.0f}s left" if left is not None else "")
        self._around_live(lambda: print(line, file=self.progress, flush=True))

    def _print(self, line: str) -> None:
        self._around_live(lambda: print(line, file=self.out, flush=True))

    def _around_live(self, show) -> None:
        """Print a line with the live line out of its way (a terminal), then redraw it."""
        if self.live is None:
            show()
            return
        with self.live.lock:
            self.live.clear()
            show()
            self.live.draw()

    def _write_progress(self, text: str) -> None:
        self.progress.write(text)
        self.progress.flush()


def is_terminal(stream: TextIO) -> bool:
    """A terminal that redraws a line in place: a TTY whose TERM is not `dumb`."""
    import os

    try:
        return stream.isatty() and os.environ.get("TERM", "") != "dumb"
    except (AttributeError, ValueError):
        return False
