"""The checks that several operations' options share: a flag threshold, a fraction of an
expected value, a bandwidth unit, and the user's own expected values."""

from __future__ import annotations

from typing import Literal

from orchestrator.errors import UsageError
from orchestrator.judging.defaults import DROP_THRESHOLD, MIN_FRACTION, PEER_THRESHOLD

# the judging defaults, for the faces (written once, in judging/defaults.py)
__all__ = ["DROP_THRESHOLD", "MIN_FRACTION", "PEER_THRESHOLD", "UNITS", "Unit", "check_min_fraction",
           "check_threshold", "check_unit", "user_expected"]

Unit = Literal["GBps", "Gbps"]
UNITS: dict[str, float] = {"GBps": 1.0, "Gbps": 8.0}  # from GB/s (1e9 bytes/s)


def check_threshold(threshold: float) -> None:
    """A fraction strictly between 0 and 1; 5 meaning 5% is refused with the fraction it means."""
    if threshold != threshold or threshold <= 0:
        raise UsageError(f"--threshold {threshold:g}: must be a fraction above 0, such as 0.05 for 5%")
    if threshold >= 1:
        hint = f"; did you mean {threshold / 100:g} ({threshold:g}%)?" if threshold < 100 else ""
        raise UsageError(f"--threshold {threshold:g}: must be a fraction below 1, such as 0.05 for 5%{hint}")


def check_min_fraction(min_fraction: float) -> None:
    """A fraction of an expected value: above 0, at most 1 (NaN refused by the comparison)."""
    if not 0 < min_fraction <= 1:
        raise UsageError(f"--min-fraction {min_fraction:g}: must be above 0 and at most 1 ({MIN_FRACTION:g}: "
                         f"{MIN_FRACTION:.0%} of expected)")


def check_unit(unit: str) -> None:
    if unit not in UNITS:
        raise UsageError(f"--unit {unit!r}: one of {', '.join(UNITS)}")


def user_expected(path: str | None) -> list:
    """The user's expected-value entries from the YAML file at `path` (none without one)."""
    from orchestrator.analysis import expected

    return expected.load(path, "user") if path else []
