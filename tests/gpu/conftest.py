"""Every GPU test runs, skips or fails by one decision (tests/gpu/gate.py), made before any
fixture of theirs (a session-scoped autouse fixture comes first): on a machine with a GPU that
torch cannot use, each test fails with the reason instead of skipping."""

from __future__ import annotations

import pytest

from tests.gpu.gate import Gate, decide, read_facts


@pytest.fixture(scope="session", autouse=True)
def gpu_gate() -> str:
    gate, reason = decide(read_facts())
    if gate is Gate.SKIP:
        pytest.skip(reason)
    if gate is Gate.FAIL:
        pytest.fail(reason, pytrace=False)
    return reason
