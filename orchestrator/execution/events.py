"""The runner's events, as types: what whoever watches a run (the console, the outcome tally, live
metrics, qualify's collector, `watch`, the Python API) is told, in this order: a round starts, its
groups start (with their base rows), it starts measuring, groups join, rows arrive, groups end (with
their failure, if any), the round ends; notes in between.

An observer subclasses `RunObserver` and overrides the hooks it needs; the runner calls every hook
of every observer directly (a hook it does not override does nothing). A hook the runner does not
know cannot be defined: `RunObserver` refuses a subclass with a public method whose name is close to
a hook's but is none (`group_endded`), so a misspelt hook is an error at import, not a silence.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from orchestrator.sweep.planner import Group
from workloads.messages import Joined, Status


@dataclass(frozen=True)
class GroupFailure:
    """Why a group, or one size of it, was not measured. `ranks` are global ranks; `culprits`: they
    are the cause (did not answer a ping, died), not merely affected (the backend failed on them)."""

    status: Status
    error: str
    group_id: str
    ranks: tuple[int, ...]
    hosts: tuple[str, ...]
    culprits: bool = False


@dataclass(frozen=True)
class RoundStarted:
    round_no: int
    groups: int


@dataclass(frozen=True)
class GroupStarted:
    group: Group
    base: dict  # the group's columns, shared by its rows (rows.group_base)


@dataclass(frozen=True)
class Measuring:
    round_no: int


@dataclass(frozen=True)
class GroupJoined:
    group: Group
    setup_s: float  # round start -> group formed
    joined: tuple[Joined, ...]


@dataclass(frozen=True)
class RowsMeasured:
    group: Group
    rows: tuple[dict, ...]


@dataclass(frozen=True)
class GroupEnded:
    group: Group
    status: Status
    rows: tuple[dict, ...]  # every row the group wrote (measured and not)
    failure: GroupFailure | None


@dataclass(frozen=True)
class Note:
    text: str


@dataclass(frozen=True)
class RoundEnded:
    round_no: int


class RunObserver:
    """Base class of everything the runner tells; each hook takes its event and does nothing here."""

    HOOKS = frozenset({"round_started", "group_started", "measuring", "group_joined", "rows_measured",
                       "group_ended", "note", "round_ended"})

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        for name, value in vars(cls).items():
            if callable(value) and not name.startswith("_") and name not in cls.HOOKS:
                near = difflib.get_close_matches(name, cls.HOOKS, n=1, cutoff=0.75)
                if near:  # a misspelt hook would never be called
                    raise TypeError(f"{cls.__name__}.{name}: not a runner event; did you mean {near[0]}?")

    def round_started(self, event: RoundStarted) -> None:
        pass

    def group_started(self, event: GroupStarted) -> None:
        pass

    def measuring(self, event: Measuring) -> None:
        pass

    def group_joined(self, event: GroupJoined) -> None:
        pass

    def rows_measured(self, event: RowsMeasured) -> None:
        pass

    def group_ended(self, event: GroupEnded) -> None:
        pass

    def note(self, event: Note) -> None:
        pass

    def round_ended(self, event: RoundEnded) -> None:
        pass


class Observers(RunObserver):
    """Several observers as one, told in their order (the runner's own list)."""

    def __init__(self, observers: list[RunObserver]) -> None:
        for o in observers:
            if not isinstance(o, RunObserver):
                raise TypeError(f"{type(o).__name__} is not a RunObserver")
        self.all = list(observers)

    def round_started(self, event: RoundStarted) -> None:
        for o in self.all:
            o.round_started(event)

    def group_started(self, event: GroupStarted) -> None:
        for o in self.all:
            o.group_started(event)

    def measuring(self, event: Measuring) -> None:
        for o in self.all:
            o.measuring(event)

    def group_joined(self, event: GroupJoined) -> None:
        for o in self.all:
            o.group_joined(event)

    def rows_measured(self, event: RowsMeasured) -> None:
        for o in self.all:
            o.rows_measured(event)

    def group_ended(self, event: GroupEnded) -> None:
        for o in self.all:
            o.group_ended(event)

    def note(self, event: Note) -> None:
        for o in self.all:
            o.note(event)

    def round_ended(self, event: RoundEnded) -> None:
        for o in self.all:
            o.round_ended(event)
