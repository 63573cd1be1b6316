"""Deterministic inputs whose reductions are known exactly.

Every value is a small integer, so sums, maxima and products are exact in every type for the
group sizes people run (sums stay within +-(2n+5), products are +-1); above the exact range of a
reduced-precision type the check falls back to a relative tolerance (`tolerance`).
The value of element `idx` of rank `rank` in check iteration `it` is a pure function of the three,
so a stale output from an earlier iteration or a chunk landing on the wrong rank is caught.
"""

from __future__ import annotations

import torch

TORCH_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int32": torch.int32,
    "int8": torch.int8,
    "float8_e4m3": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
}

# Largest integer up to which every integer is exactly representable.
_EXACT_INT = {
    "float32": 2**24,
    "float16": 2**11,
    "bfloat16": 2**8,
    "float64": 2**53,
    "float8_e4m3": 2**4,
    "float8_e5m2": 2**3,
}

# Value written into output buffers before a check, so an untouched output never passes.
SENTINEL = 77


def _integers(rank: int, it: int, start: int, numel: int, op: str, device: str) -> torch.Tensor:
    idx = torch.arange(start, start + numel, dtype=torch.int64, device=device)
    # Rank 0 adds a pattern of another period, so that no group size makes the reduction the
    # same for every element (a chunk on the wrong rank, or a stale output, must differ).
    if op == "sum":
        extra = (idx * 5 + it) % 11 - 5 if rank == 0 else 0
        return (rank * 3 + idx + 7 * it) % 5 - 2 + extra
    if op == "prod":
        if rank == 0:
            return torch.where((idx + it) % 3 == 0, -1, 1)
        return ((rank + idx + it) % 2) * 2 - 1
    # max, min and the non-reducing collectives: a wide range so that ranks differ.
    return (rank * 131 + idx * 7 + it * 13) % 97 - 48


def values(
    rank: int, it: int, start: int, numel: int, op: str, dtype: str, device: str = "cpu"
) -> torch.Tensor:
    """Rank `rank`'s contribution at global element indices [start, start + numel)."""
    return _integers(rank, it, start, numel, op, device).to(TORCH_DTYPES[dtype])


_COMBINE = {"sum": torch.add, "prod": torch.mul, "max": torch.maximum, "min": torch.minimum}


def reduced(
    n: int, it: int, start: int, numel: int, op: str, dtype: str, device: str = "cpu"
) -> torch.Tensor:
    """The exact reduction over ranks 0..n-1 of `values`, computed in int64, then cast."""
    combine = _COMBINE[op]
    exact = _integers(0, it, start, numel, op, device)
    for r in range(1, n):
        exact = combine(exact, _integers(r, it, start, numel, op, device))
    return exact.to(TORCH_DTYPES[dtype])


def tolerance(dtype: str, n: int, op: str) -> float:
    """Relative tolerance of a reduction's result; 0 where the result is exact."""
    limit = _EXACT_INT.get(dtype)
    if limit is None or op != "sum" or 2 * n + 5 <= limit:
        return 0.0
    # Never 1 or more: a tolerance that wide would pass a zeroed or sign-flipped output.
    return min(float(torch.finfo(TORCH_DTYPES[dtype]).eps) * n, 0.5)


def count_wrong(out: torch.Tensor, expected: torch.Tensor, rtol: float) -> int:
    """Number of elements of `out` that differ from `expected` (beyond `rtol`)."""
    if rtol == 0.0:
        if out.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            out, expected = out.float(), expected.float()
        return int((out != expected).sum())
    o, e = out.double(), expected.double()
    return int(((o - e).abs() > rtol * e.abs()).sum())
