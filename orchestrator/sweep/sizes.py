"""Message sizes: parsing `8`, `1K`, `64M`, `1G` (powers of 1024, as nccl-tests) and sweeps."""

from __future__ import annotations

import re

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_PATTERN = re.compile(r"^\s*(\d+)\s*([KMGT]?)(I?B)?\s*$", re.IGNORECASE)
# bits, as rates are written: an upper-case prefix and a lower-case b (1Gb, 100Mb), or bit (8Mbit)
_BITS = re.compile(r"^\s*(\d+)\s*(?:([KMGT])i?b|([KMGTkmgt]?)i?bits?)\s*$")


class BitUnit(ValueError):
    """A size written in bits (1Gb): refused, with the byte spellings."""


def parse_bytes(text: str | int) -> int:
    """`1K` -> 1024. Raises ValueError naming the text when it is not a size."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    m = _PATTERN.match(str(text))
    bits = _BITS.match(str(text))
    if bits:  # a rate's unit, not a size's
        n, prefix = bits.group(1), (bits.group(2) or bits.group(3) or "").upper()
        raise BitUnit(f"a size in bits; sizes are bytes: {n}{prefix}, {n}{prefix}B{f' or {n}{prefix}iB' if prefix else ''}")
    if not m:
        raise ValueError(f"not a byte size: {text!r} (examples: 8, 1K, 64M, 1G)")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def sweep(min_bytes: int, max_bytes: int, step_factor: int) -> list[int]:
    """min, min*f, min*f^2, ... up to and including max (when reached exactly)."""
    sizes = []
    size = min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= step_factor
    return sizes


def format_bytes(n: int) -> str:
    """Compact binary units for tables: 512, 4K, 1M, 1.5G."""
    for unit in ("T", "G", "M", "K"):
        scale = _UNITS[unit]
        if n >= scale:
            value = n / scale
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.1f}{unit}"
    return str(n)
