"""Durations: one spelling for every option and YAML key that takes a time (`--group-timeout`,
`watch --every`, `lab up --timeout`, ...): `30s`, `5m`, `1h`, `2d`, and a bare number is seconds.
Sizes have their own parser beside the sweep (sizes.parse_bytes, binary: K = 1024)."""

from __future__ import annotations

import math
import re

from orchestrator.errors import UsageError

SECONDS_PER = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# A plain decimal (exponents too: `--group-timeout 1e3` was a float before units came) and one
# lower-case unit; `5M` is refused rather than read as minutes or months.
_PATTERN = re.compile(r"\s*((?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)([smhd]?)\s*")
EXAMPLES = "30s, 5m, 1h or 2d (a bare number is seconds)"


def parse_duration(text: str | int | float, option: str, max_s: float | None = None) -> float:
    """Seconds of `30s`, `5m`, `1h`, `2d` or a bare number (seconds; a YAML number too). Anything
    else, zero, or more than `max_s` raises UsageError naming `option` and the value (exit 2)."""
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise UsageError(f"{option} {_shown(text)}: expected a duration such as {EXAMPLES}")
    if isinstance(text, str):
        m = _PATTERN.fullmatch(text)
        if not m:
            raise UsageError(f"{option} {_shown(text)}: expected a duration such as {EXAMPLES}")
        seconds = float(m.group(1)) * SECONDS_PER[m.group(2) or "s"]
    else:
        seconds = float(text)
    if not math.isfinite(seconds) or seconds <= 0:
        raise UsageError(f"{option} {_shown(text)}: must be a positive duration such as {EXAMPLES}")
    if max_s is not None and seconds > max_s:
        raise UsageError(f"{option} {_shown(text)}: must be at most {format_duration(max_s)}")
    return seconds


def format_duration(seconds: float) -> str:
    """The shortest exact spelling parse_duration reads back: 300 -> 5m, 90 -> 90s, 1.5 -> 1.5s."""
    for unit in ("d", "h", "m"):
        count = seconds / SECONDS_PER[unit]
        if count >= 1 and count == int(count):
            return f"{int(count)}{unit}"
    return f"{seconds:g}s"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
