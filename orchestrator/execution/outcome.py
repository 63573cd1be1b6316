"""Tally: what a run did, counted from the runner's events (an observer, like the console). (Named so
beside qualify's Outcome, a probe's verdict.)"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

from orchestrator.execution.events import (
    GroupEnded,
    GroupFailure,
    GroupJoined,
    RoundEnded,
    RoundStarted,
    RowsMeasured,
    RunObserver,
)
from orchestrator.execution.rows import where
from orchestrator.execution.transport import BUILD_MANIFEST
from workloads.messages import Status


@dataclass
class Tally(RunObserver):
    """Counts of groups and rows, the failures, the devices seen, and where the time went."""

    groups_ok: int = 0
    groups_failed: int = 0  # failed or timed out
    groups_skipped: int = 0
    rows: int = 0
    n_wrong: int = 0
    failures: list[GroupFailure] = field(default_factory=list)  # groups, and sizes a group skipped
    device_names: set[str] = field(default_factory=set)
    # the build NCCL ran with, from NCCL's log (its version, git hash, plugins, CTA policy): manifest field -> values
    nccl_build: dict[str, set[str]] = field(default_factory=lambda: {name: set() for name in BUILD_MANIFEST})
    setup_s: list[float] = field(default_factory=list)  # round start -> group formed, per group
    teardown_s: list[float] = field(default_factory=list)  # last measurement -> group left, per group
    first_row_at: float | None = None  # time.monotonic() of the first row
    rounds: list[dict] = field(default_factory=list)  # per round: groups, wall_s, measured_s (inside timed iterations)
    _measured: dict[int, dict[str, float]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(float)))
    _round_t0: dict[int, tuple[float, int]] = field(default_factory=dict)
    _last_result_at: dict[str, float] = field(default_factory=dict)

    def __repr__(self) -> str:  # what a Python caller sees of `result.outcome`: the counts, not the internals
        return (f"Tally(groups_ok={self.groups_ok}, groups_failed={self.groups_failed}, "
                f"groups_skipped={self.groups_skipped}, rows={self.rows}, n_wrong={self.n_wrong}, "
                f"failures={len(self.failures)})")

    @property
    def measured_s(self) -> float:
        """Wall time inside timed iterations: the groups of a round measure at the same time,
        so a round counts as long as its longest group."""
        return sum(max(groups.values()) for groups in self._measured.values())

    # -- RunObserver ----------------------------------------------------------------------
    def round_started(self, event: RoundStarted) -> None:
        self._round_t0[event.round_no] = (time.monotonic(), event.groups)

    def round_ended(self, event: RoundEnded) -> None:
        t0, groups = self._round_t0.pop(event.round_no)
        measured = max(self._measured.get(event.round_no, {0: 0.0}).values())
        self.rounds.append({"round": event.round_no, "groups": groups, "wall_s": time.monotonic() - t0,
                            "measured_s": measured})

    def group_joined(self, event: GroupJoined) -> None:
        self.setup_s.append(event.setup_s)
        self.device_names.update(j.device_name for j in event.joined)
        self._last_result_at[event.group.group_id] = time.monotonic()

    def rows_measured(self, event: RowsMeasured) -> None:
        now = time.monotonic()
        if self.first_row_at is None:
            self.first_row_at = now
        for row in event.rows:
            self._last_result_at[row["group_id"]] = now
            if row["status"] != Status.OK.value:  # a size the group skipped (out of memory)
                self.failures.append(size_failure(row))
                continue
            self._measured[row["round"]][row["group_id"]] += sum(row["iter_time_us"]) / 1e6

    def group_ended(self, event: GroupEnded) -> None:
        group, status, rows, failure = event.group, event.status, event.rows, event.failure
        self.rows += len(rows)
        for row in rows:
            for name, seen in self.nccl_build.items():
                if row.get(name):
                    seen.update(row[name].split(","))
        self.n_wrong += sum(r.get("n_wrong") or 0 for r in rows)
        if status is Status.OK:
            self.groups_ok += 1
            self.teardown_s.append(time.monotonic() - self._last_result_at.get(group.group_id, time.monotonic()))
        elif status is Status.SKIPPED:
            self.groups_skipped += 1
        else:
            self.groups_failed += 1
        if failure is not None:
            self.failures.append(failure)


def size_failure(row: dict) -> GroupFailure:
    """The failure of one size of a group that went on (a row not ok among measured ones)."""
    failed = row["failed_ranks"] or []
    return GroupFailure(Status(row["status"]), row["error"] or row["status"], row["group_id"],
                        tuple(row["ranks"][j] for j in failed), tuple(sorted({where(row, j) for j in failed})))
