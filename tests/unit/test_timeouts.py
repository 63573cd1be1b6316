"""How long a run waits for the cluster it is told to join, on a clock of the test's own: the default
(30 s) and $COLLBENCH_CONNECT_TIMEOUT_S, a refused port retried about once a second until then.
The same wait against a real closed port, with the variable set to a few seconds:
tests/integration/test_environment.py."""

from __future__ import annotations

import socket

import pytest

from orchestrator import timeouts
from orchestrator.errors import UsageError
from orchestrator.execution import connect


class Clock:
    """time.monotonic and time.sleep for the connect loop: sleeping advances the clock."""

    def __init__(self) -> None:
        self.now, self.slept = 1000.0, []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(connect.time, "monotonic", fake.monotonic)
    monkeypatch.setattr(connect.time, "sleep", fake.sleep)
    return fake


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_default_wait_is_30_s_and_the_variable_sets_another(monkeypatch):
    monkeypatch.delenv(timeouts.TIMEOUT_ENV, raising=False)
    assert timeouts.connect_timeout_s() == 30.0
    monkeypatch.setenv(timeouts.TIMEOUT_ENV, "4.5")
    assert timeouts.connect_timeout_s() == 4.5
    for bad in ("0", "-1", "nan", "inf", "x"):
        monkeypatch.setenv(timeouts.TIMEOUT_ENV, bad)
        with pytest.raises(UsageError, match=f"COLLBENCH_CONNECT_TIMEOUT_S {bad!r}: expected a positive number"):
            timeouts.connect_timeout_s()


def test_a_refused_address_is_retried_every_second_for_the_default_30_s(clock, monkeypatch):
    monkeypatch.delenv(timeouts.TIMEOUT_ENV, raising=False)
    port = _closed_port()
    with pytest.raises(UsageError) as refused:
        connect._join_or_start(f"127.0.0.1:{port}")
    assert str(refused.value) == f"--address 127.0.0.1:{port}: no Ray cluster answered in 30 s (connection refused)"
    assert sum(clock.slept) == pytest.approx(30.0) and len(clock.slept) == 30 and max(clock.slept) <= 1.0
