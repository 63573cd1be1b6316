"""Deterministic inputs whose reductions are known exactly, written and checked without large
temporaries.

Every value is a small integer, so sums, maxima and products are exact in every type and for
every group size, and the check compares exactly (float8 bit for bit): sums stay within
+-(2n+5), products are +-1; where 2n+5 leaves a type's exact integers (float8 from 2 or 6 ranks,
bfloat16 from 126, float16 from 1022) a sum's inputs are sparse: each element has at most as many
non-zero ranks, each +-1, as the type has exact integers, so every partial sum a backend forms,
in any order or tree, is exact too (a tolerance on the final value failed on 16 to 64 ranks of
float8, where NCCL rounds each partial sum).
The value of element `idx` of rank `rank` in iteration `it` is a pure function of the three and
is periodic in `idx` (period 55 for sum, 55 m for a sparse sum, 6 for prod, 97 otherwise), so a
stale output from an earlier iteration or a chunk landing on the wrong rank is caught, and so is
the reduction over all ranks: it is computed once for one period (n x period small integers, whatever the message
size), then written or compared period by period. Writing a buffer allocates nothing of its
size; checking one compares at most CHECK_CHUNK elements at a time. Only casts, copies, fills and
views touch a float8 buffer (all that CUDA offers for float8 in every torch release):
tests/unit/test_float8_ops.py runs the fill and the check under a mode that refuses the rest.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from workloads.memory import CHECK_CHUNK, COUNT_CHUNK
from workloads.registry import ALL, Span

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


_PERIOD = {"sum": 55, "prod": 6}
_DEFAULT_PERIOD = 97
_RANKS_AT_ONCE = 4096  # ranks combined per step when reducing over a large group


def sparse_stride(op: str, n: int, dtype: str) -> int:
    """0 for dense inputs; else the stride m of a sparse sum: rank r is non-zero at element idx
    only where (r + idx) % m == 0, so at most ceil(n / m) <= the type's exact integers are."""
    limit = _EXACT_INT.get(dtype)
    if op != "sum" or limit is None or 2 * n + 5 <= limit:
        return 0
    return -(-n // limit)


def period(op: str, stride: int = 0) -> int:
    return _PERIOD["sum"] * stride if stride else _PERIOD.get(op, _DEFAULT_PERIOD)


def _integers(ranks: torch.Tensor, it: int, idx: torch.Tensor, op: str, stride: int = 0) -> torch.Tensor:
    """Values of `ranks` (a column) at element indices `idx` (a row), as int64."""
    # Rank 0 adds a pattern of another period, so that no group size makes the reduction the
    # same for every element (a chunk on the wrong rank, or a stale output, must differ).
    if stride:  # a sparse sum: values in -1..1, periods 5 (11 for rank 0) and the stride's
        on = (ranks + idx) % stride == 0
        own = torch.where(ranks == 0, (idx * 5 + it) % 11, (ranks // stride + idx * 3 + 7 * it) % 5) % 3 - 1
        return torch.where(on, own, 0)
    if op == "sum":
        extra = torch.where(ranks == 0, (idx * 5 + it) % 11 - 5, 0)
        return (ranks * 3 + idx + 7 * it) % 5 - 2 + extra
    if op == "prod":
        first = torch.where((idx + it) % 3 == 0, -1, 1)
        return torch.where(ranks == 0, first, ((ranks + idx + it) % 2) * 2 - 1)
    # max, min and the non-reducing collectives: a wide range so that ranks differ.
    return (ranks * 131 + idx * 7 + it * 13) % 97 - 48


_COMBINE = {"sum": torch.sum, "prod": torch.prod, "max": torch.amax, "min": torch.amin}
_PAIR = {"sum": torch.add, "prod": torch.mul, "max": torch.maximum, "min": torch.minimum}


def pattern(source: int, n: int, it: int, op: str, dtype: str, device: str | torch.device = "cpu",
            start: int = 0) -> torch.Tensor:
    """One period of `source`'s values in `dtype` on `device`, lined up with a buffer whose first
    element is global index `start`. The reduction (ALL) is computed in int64 over every rank, then
    cast, as the exact result a backend should reach.

    All of it happens on the CPU in int64, and only the finished period is cast and copied to the
    device: CUDA has casts, copies and fills for float8 but no roll or arithmetic (`roll_cuda`
    dispatches no float8 type), and the period is a few dozen elements."""
    stride = sparse_stride(op, n, dtype)
    idx = torch.arange(period(op, stride), dtype=torch.int64).unsqueeze(0)
    if source != ALL:
        exact = _integers(torch.tensor([[source]]), it, idx, op, stride)[0]
    else:
        exact = None
        for lo in range(0, n, _RANKS_AT_ONCE):
            ranks = torch.arange(lo, min(n, lo + _RANKS_AT_ONCE), dtype=torch.int64).unsqueeze(1)
            part = _COMBINE[op](_integers(ranks, it, idx, op, stride), dim=0)
            exact = part if exact is None else _PAIR[op](exact, part)
    exact = torch.roll(exact, -(start % exact.numel()))
    return exact.to(TORCH_DTYPES[dtype]).to(device)


def write(buf: torch.Tensor, spans: Sequence[Span], n: int, it: int, op: str, dtype: str) -> None:
    """Fill `buf` as `spans` describe, one period at a time (no temporary of the buffer's size)."""
    for s in spans:
        p = pattern(s.source, n, it, op, dtype, buf.device, s.start)
        dst = buf[s.at : s.at + s.numel]
        whole = s.numel // p.numel() * p.numel()
        if whole:
            dst[:whole].view(-1, p.numel()).copy_(p)
        if whole < s.numel:
            dst[whole:].copy_(p[: s.numel - whole])


def count_wrong(buf: torch.Tensor, spans: Sequence[Span], n: int, it: int, op: str, dtype: str) -> int:
    """Elements of `buf` within `spans` that differ from what the spans describe, compared
    CHECK_CHUNK elements at a time."""
    wrong = 0
    for s in spans:
        p = pattern(s.source, n, it, op, dtype, buf.device, s.start)
        size = p.numel()
        whole = s.numel // size * size
        rows = max(1, CHECK_CHUNK // size)
        region = buf[s.at : s.at + s.numel]
        for lo in range(0, whole, rows * size):
            hi = min(whole, lo + rows * size)
            wrong += _mismatches(region[lo:hi].view(-1, size), p)
        if whole < s.numel:
            wrong += _mismatches(region[whole:], p[: s.numel - whole])
    return wrong


_FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def _mismatches(out: torch.Tensor, expected: torch.Tensor) -> int:
    """Elements of `out` that differ from `expected` (broadcast), with a bool mask of `out`'s size as
    the only large temporary: `any()` reads the mask in place, and only a mask with a mismatch is
    counted, COUNT_CHUNK elements at a time. On CUDA `count_nonzero` is `(x != 0).sum()` and a bool
    sum reduces through an int64 copy (make_reduction casts to kLong: pytorch issue 55366), 9 bytes
    per counted element, so counting the whole mask would take 9 times the mask."""
    if out.dtype in _FLOAT8:
        # On CUDA, float8 is sure of casts, copies and fills only (no roll; eq/ne only in recent
        # torch releases): compare bit patterns (the values are small integers, never -0 or NaN,
        # so equal values have equal bits).
        out, expected = out.view(torch.uint8), expected.view(torch.uint8)
    mask = (out != expected).view(-1)
    if not bool(mask.any()):
        return 0
    return sum(int(torch.count_nonzero(part)) for part in mask.split(COUNT_CHUNK))


def values(rank: int, it: int, start: int, numel: int, op: str, dtype: str, device: str = "cpu",
           n: int | None = None) -> torch.Tensor:
    """Rank `rank`'s contribution, in a group of `n` ranks (default rank + 1), at global element
    indices [start, start + numel) (a new tensor)."""
    out = torch.empty(numel, dtype=TORCH_DTYPES[dtype], device=device)
    write(out, [Span(0, numel, rank, start)], rank + 1 if n is None else n, it, op, dtype)
    return out


def reduced(n: int, it: int, start: int, numel: int, op: str, dtype: str, device: str = "cpu") -> torch.Tensor:
    """The exact reduction over ranks 0..n-1 of `values` (a new tensor)."""
    out = torch.empty(numel, dtype=TORCH_DTYPES[dtype], device=device)
    write(out, [Span(0, numel, ALL, start)], n, it, op, dtype)
    return out
