"""Element types and reduction operators: names, sizes and which backend supports which.

This module does not import torch, so the driver can validate a sweep without it.
"""

from __future__ import annotations

ELEMENT_BYTES: dict[str, int] = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float64": 8,
    "int32": 4,
    "int8": 1,
    "float8_e4m3": 1,
    "float8_e5m2": 1,
}

# nccl-tests' and C's names for them (`-d half`), accepted on input; rows record the names above.
DTYPE_ALIASES: dict[str, str] = {
    "float": "float32",
    "half": "float16",
    "bf16": "bfloat16",
    "double": "float64",
    "int": "int32",
    "char": "int8",
    "f8e4m3": "float8_e4m3",
    "f8e5m2": "float8_e5m2",
}

OPS: tuple[str, ...] = ("sum", "max", "min", "prod")

# Operator recorded for collectives that do not reduce (all_gather, broadcast, ...).
NO_OP = "none"

_FLOAT8 = {"float8_e4m3", "float8_e5m2"}

# What each backend accepts. gloo in torch 2.13 runs every call of this project for every
# type but the float8 ones ("Invalid scalar type"); tests/integration runs every gloo pair.
# NCCL handles all of them; float8 reductions need NCCL >= 2.24 and compute capability 9.0, which
# a run checks on every node before it starts (orchestrator.sweep.devices).
BACKEND_DTYPES: dict[str, frozenset[str]] = {
    "gloo": frozenset(set(ELEMENT_BYTES) - _FLOAT8),
    "nccl": frozenset(ELEMENT_BYTES),
}


def unsupported_pair(backend: str, dtypes: list[str]) -> str | None:
    """Return a message naming the first (backend, dtype) pair that cannot run, or None."""
    for dtype in dtypes:
        if dtype not in BACKEND_DTYPES[backend]:
            supported = ",".join(sorted(BACKEND_DTYPES[backend]))
            return f"--dtypes: {dtype} is not supported by backend {backend} (it supports {supported})"
    return None
