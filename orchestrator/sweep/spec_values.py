"""The values of the sweep options as people write them, checked and converted (sweep/spec.py
declares the options): a bad value named in one short line, integers and environment values read
strictly, the words each kind of value is described by."""

from __future__ import annotations

import re
from typing import Any

from orchestrator.errors import UsageError


def brief_repr(value: Any) -> str:
    """A bad value as the one line names it: its repr, cut short (a YAML list may nest a billion items)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        text = repr(value)
        return text if len(text) <= 80 else text[:77] + "..."
    return f"(a YAML {type(value).__name__})"


KIND_WORDS = {
    "list": "a comma-separated list",
    "ints": "a comma-separated list of integers",
    "env": "NAME=VALUE items",
    "bytes": "a byte size such as 8, 1K, 64M or 1G",
    "int": "an integer",
    "float": "a number",
    "duration": "a duration such as 30s, 5m or 1h",
    "bool": "true or false",
    "str": "a string",
}


def env_value(name: Any, value: Any) -> str:
    """One value of a YAML env mapping as the text the variable gets; YAML's booleans (true, yes,
    on) are refused rather than guessed at (NCCL wants 1, a shell would pass True)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise UsageError(f"--env {name}: {value!r} is not a string or number (quote it in YAML: {name}: '1')")
    return str(value)


def strict_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if not re.fullmatch(r"[+-]?\d+", text):
        raise ValueError
    return int(text)
