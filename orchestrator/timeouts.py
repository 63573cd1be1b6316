"""How long collbench waits for what it connects to before a run starts: the Ray cluster named by
--address or $RAY_ADDRESS, and an object store named by --output."""

from __future__ import annotations

import os

from orchestrator.errors import UsageError

CONNECT_TIMEOUT_S = 30.0
TIMEOUT_ENV = "COLLBENCH_CONNECT_TIMEOUT_S"


def connect_timeout_s() -> float:
    """$COLLBENCH_CONNECT_TIMEOUT_S, else CONNECT_TIMEOUT_S."""
    raw = os.environ.get(TIMEOUT_ENV)
    if raw is None or not raw.strip():
        return CONNECT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise UsageError(f"${TIMEOUT_ENV} {raw!r}: expected a positive number of seconds")
    return value
