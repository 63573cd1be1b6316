"""Every GPU test runs on the GPUs, in its CPU form, or fails, by one decision (tests/gpu/gate.py),
made before any fixture of theirs (a session-scoped autouse fixture comes first): on a machine
without an NVIDIA GPU the CPU form runs (gloo, CPU tensors: what the tests assert of sets, columns,
JSON and commands runs in CI); on a machine with a GPU that torch cannot use, each test fails with
the reason instead."""

from __future__ import annotations

import pytest

from tests.gpu.gate import Gate, Target, decide, read_facts, target_of


@pytest.fixture(scope="session", autouse=True)
def target() -> Target:
    gate, reason = decide(read_facts())
    if gate is Gate.FAIL:
        pytest.fail(reason, pytrace=False)
    return target_of(gate, reason)
