"""An all-to-all-v's traffic matrix, as every rank and the driver compute it (torch-free).

A matrix is a square tuple of non-negative integer weights: cell [i][j] is what rank i sends rank
j, in any unit (bytes from a file, tokens from a router). A sweep keeps its shape and sweeps its
scale: at a count of C elements, cell [i][j] carries floor(W[i][j] * C / M) elements, where M is
the largest per-rank total (max over ranks of what it sends or receives), so the busiest rank moves
at most C elements; integers only, so every rank and the driver get the same counts.

Bus bandwidth is nccl-tests' for alltoallv (src/alltoallv.cu, AlltoAllvGetBw): algbw is the busiest
rank's bytes (the larger of what it sends and receives) over the time, busbw = algbw x (n-1)/n.
Without a matrix the pattern is nccl-tests' generated one (NCCL_TESTS_ALLTOALLV_SPREAD, default 1):
rank i sends rank j a share growing with their distance (j - i) mod n.
"""

from __future__ import annotations

import functools
import hashlib

Matrix = tuple[tuple[int, ...], ...]

SPREAD_SCALE = 1 << 20  # the generated pattern's shares as integers (parts per 2^20 of a rank's total)


def generated(n: int, spread: float = 1.0) -> Matrix:
    """nccl-tests' distance-weighted pattern for n ranks: a blend of uniform (spread 0) and of
    shares proportional to the distance (j - i) mod n (spread 1); each rank sends and receives the
    same total."""
    if n == 1:
        return ((SPREAD_SCALE,),)
    pairs = n * (n - 1) // 2

    def share(d: int) -> int:
        return int(((1.0 - spread) / n + spread * d / pairs) * SPREAD_SCALE)

    return tuple(tuple(share((j - i) % n) for j in range(n)) for i in range(n))


def rank_totals(weights: Matrix) -> list[int]:
    """Each rank's total: the larger of what it sends (its row) and receives (its column)."""
    n = len(weights)
    return [max(sum(weights[r]), sum(weights[i][r] for i in range(n))) for r in range(n)]


def busiest(weights: Matrix) -> int:
    """The largest per-rank total."""
    return max(rank_totals(weights))


@functools.lru_cache(maxsize=64)
def counts(weights: Matrix, count: int) -> Matrix:
    """Elements of each cell at a scale of `count` elements for the busiest rank."""
    top = busiest(weights)
    if top == 0:
        return tuple(tuple(0 for _ in row) for row in weights)
    return tuple(tuple(w * count // top for w in row) for row in weights)


def send_counts(weights: Matrix, count: int, rank: int) -> tuple[int, ...]:
    return counts(weights, count)[rank]


def recv_counts(weights: Matrix, count: int, rank: int) -> tuple[int, ...]:
    return tuple(row[rank] for row in counts(weights, count))


def offsets(sizes: tuple[int, ...]) -> list[int]:
    """Where each chunk starts in a buffer of chunks of `sizes`, one after another."""
    out, at = [], 0
    for s in sizes:
        out.append(at)
        at += s
    return out


def busiest_numel(weights: Matrix, count: int) -> int:
    """Elements the busiest rank really moves at this scale (at most `count`: cells are floored)."""
    return busiest(counts(weights, count))


def total_numel(weights: Matrix, count: int) -> int:
    return sum(map(sum, counts(weights, count)))


def heaviest_pair(weights: Matrix) -> tuple[int, int]:
    """(sender, receiver) of the largest cell off the diagonal (the diagonal stays on its rank)."""
    n = len(weights)
    cells = [(weights[i][j], -i, -j) for i in range(n) for j in range(n) if i != j] or [(weights[0][0], 0, 0)]
    _, i, j = max(cells)
    return -i, -j


def digest(weights: Matrix) -> str:
    """The matrix's identity in rows: the same shape from the same file or seed, the same digest."""
    text = ";".join(",".join(map(str, row)) for row in weights)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
