"""The runner's typed events (issue 24): observers subclass one base with no-op hooks, a misspelt
hook is refused when its class is defined, a failure is one frozen type wherever it is built, and
a Session's steps say which step they need instead of failing with AttributeError."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from orchestrator.execution import console
from orchestrator.execution.events import GroupEnded, GroupFailure, Note, Observers, RunObserver
from orchestrator.execution.outcome import Tally, size_failure
from orchestrator.execution.session import Session, SessionOrder
from orchestrator.sweep.planner import Group
from orchestrator.sweep.spec import SweepSpec
from workloads.messages import Status


def test_a_misspelt_hook_is_refused_where_its_class_is_defined():
    with pytest.raises(TypeError, match=r"Watcher.group_endded: not a runner event; did you mean group_ended\?"):
        class Watcher(RunObserver):  # noqa: F841
            def group_endded(self, event) -> None:
                pass

    class Helper(RunObserver):  # public methods far from any hook are the observer's own business
        def results(self) -> list:
            return []

    assert Helper().results() == []


def test_observers_are_told_in_order_and_hooks_left_out_do_nothing():
    seen = []

    class Notes(RunObserver):
        def __init__(self, tag: str) -> None:
            self.tag = tag

        def note(self, event: Note) -> None:
            seen.append((self.tag, event.text))

    group = Group("r0-g0", "intra", 0, (0, 1))
    everyone = Observers([Notes("a"), RunObserver(), Notes("b")])
    everyone.note(Note("hello"))
    everyone.group_ended(GroupEnded(group, Status.OK, (), None))  # nobody overrides it: nothing happens
    assert seen == [("a", "hello"), ("b", "hello")]
    with pytest.raises(TypeError, match="dict is not a RunObserver"):
        Observers([{}])


def test_a_failure_is_frozen_and_the_same_type_from_a_group_and_from_a_size():
    failure = GroupFailure(Status.TIMEOUT, "deadline passed", "r0-g1", (2, 3), ("node-b (10.0.0.2)",), culprits=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        failure.error = "x"
    row = {"status": "failed", "error": "out of memory on rank 1", "group_id": "r1-g0", "ranks": [4, 5, 6],
           "failed_ranks": [1], "hosts": ["a", "b", "c"], "node_ips": ["10.0.0.1", "10.0.0.2", "10.0.0.3"]}
    skipped = size_failure(row)
    assert skipped == GroupFailure(Status.FAILED, "out of memory on rank 1", "r1-g0", (5,), ("b (10.0.0.2)",))
    outcome = Tally()
    outcome.group_ended(GroupEnded(Group("r0-g1", "inter", 0, (2, 3)), Status.TIMEOUT, (), failure))
    outcome.failures.append(skipped)
    assert console.failure_summary(outcome.failures) == [
        "[ranks 2,3 on node-b (10.0.0.2)] timeout: deadline passed (groups r0-g1)",
        "[ranks 5 on b (10.0.0.2)] failed: out of memory on rank 1 (groups r1-g0)",
    ]
    assert outcome.groups_failed == 1


def test_a_session_step_before_the_one_it_needs_says_which(tmp_path):
    s = Session(SweepSpec(output=str(tmp_path / "out")), "run-1", dt.datetime.now(dt.timezone.utc))
    # every attribute exists from construction
    assert (s.inv, s.backend, s.caps, s.platforms, s.pool, s.manifest) == (None, None, {}, {}, None, {})
    with pytest.raises(SessionOrder, match=r"cluster\(\) runs inside `with Session"):
        s.cluster()
    with pytest.raises(SessionOrder, match=r"check_devices\(\) needs cluster\(\) first"):
        s.check_devices({2})
    with pytest.raises(SessionOrder, match=r"start\(\) needs check_devices\(\) first"):
        s.start(1, [])
    with pytest.raises(SessionOrder, match=r"finish\(\) needs start\(\) first"):
        s.finish(Tally())
