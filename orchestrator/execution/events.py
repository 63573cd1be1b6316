"""The runner's events: what whoever watches a run (the console, the outcome tally) is told."""

from __future__ import annotations

from typing import Protocol

from orchestrator.sweep.planner import Group
from workloads.messages import Joined, Status


class RunObserver(Protocol):
    """Told what happens, in order: a group starts (its base row), a round starts measuring, a
    group joins, rows arrive, a group ends (with its failure, if any); notes in between."""

    def group_started(self, group: Group, base: dict) -> None: ...
    def measuring(self) -> None: ...
    def group_joined(self, group: Group, setup_s: float, joined: list[Joined]) -> None: ...
    def rows_measured(self, rows: list[dict]) -> None: ...
    def group_ended(self, group: Group, status: Status, rows: list[dict], failure: dict | None) -> None: ...
    def note(self, text: str) -> None: ...
