"""Joining a Ray cluster, or starting an embedded one when none is named."""

from __future__ import annotations

import logging
import os

import ray


def connect(address: str | None) -> str:
    """Join `address` (or $RAY_ADDRESS); otherwise start a private local instance. Workers'
    log lines stay in their own log files (Ray's session logs), out of the run's table.

    Returns a description of what was joined, for the console.
    """
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        return f"Ray cluster at {address}"
    # "local" always starts a new instance: never attach to another user's cluster by accident.
    ray.init(address="local", include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    return "embedded Ray instance"


def disconnect() -> None:
    if ray.is_initialized():
        ray.shutdown()
