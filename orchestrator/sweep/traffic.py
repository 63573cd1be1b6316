"""`--traffic`: where an all_to_allv's matrix comes from, resolved to a matrix per group size.

Three forms, each checked before anything runs (UsageError: exit 2, one line naming the value):

- a file: nccl-tests' traffic matrix (NCCL_TESTS_ALLTOALLV_MATRIX_FILE: whitespace-separated
  bytes, one row per line, cell [i][j] what rank i sends rank j), the same as CSV, or YAML (a list
  of rows, or `matrix:` holding one). Square, non-negative, not all zero. A group of n ranks uses
  its first n rows and columns, as nccl-tests does; a larger group than the matrix is refused.
- `moe:experts=E,topk=K,skew=S,seed=N`: a mixture-of-experts router's traffic. E experts are
  placed in contiguous blocks across the group's ranks (expert e on rank e*n//E); each rank routes
  TOKENS_PER_RANK tokens, each to K distinct experts drawn by popularity, a Zipf law of exponent S
  over a seeded shuffle of the experts (S=0: a balanced router); cell [i][j] counts the tokens rank
  i sends to experts on rank j. The same text gives the same matrix on every node and every run.
- `nccl-tests:spread=S`: nccl-tests' generated pattern (its default, spread 1, is also what
  all_to_allv runs without --traffic).

A sweep keeps the matrix's shape and sweeps its scale (workloads.traffic): -b/-e size the busiest
rank's bytes.
"""

from __future__ import annotations

import functools
import math
import os
import re
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from orchestrator import yamlfile
from orchestrator.errors import UsageError
from workloads import traffic

MOE_DEFAULTS = {"experts": 256, "topk": 8, "skew": 0.0, "seed": 0}  # DeepSeek-V3's 256 routed experts, top 8
TOKENS_PER_RANK = 4096  # the router's sample per rank: a cell's weight, not bytes (the sweep sets the bytes)
MAX_EXPERTS = 4096  # the router draws tokens x experts scores a chunk of tokens at a time
TOKEN_CHUNK = 256
MAX_FILE_BYTES = 64 << 20
MAX_DIM = 1 << 14


@dataclass(frozen=True)
class Traffic:
    """A resolved --traffic: its text (the rows' traffic_source) and how to make a group's matrix."""

    source: str
    file_matrix: traffic.Matrix | None = None
    moe: tuple[int, int, float, int] | None = None  # experts, topk, skew, seed
    spread: float = 1.0

    def for_ranks(self, n: int) -> traffic.Matrix:
        """The matrix of a group of n ranks (UsageError where this traffic has none)."""
        if self.file_matrix is not None:
            dim = len(self.file_matrix)
            if n > dim:
                raise UsageError(f"--traffic {self.source}: a {dim}x{dim} matrix, and the plan has a group of "
                                 f"{n} ranks (give a matrix of at least {n} rows, or --group-sizes up to {dim})")
            block = tuple(row[:n] for row in self.file_matrix[:n])
            if not any(map(any, block)):
                raise UsageError(f"--traffic {self.source}: its first {n} rows and columns (a group of {n} ranks) "
                                 "are all 0")
            return block
        if self.moe is not None:
            return _moe(n, *self.moe)
        return traffic.generated(n, self.spread)


def parse(text: str | None) -> Traffic:
    """--traffic's value (None: nccl-tests' generated pattern, spread 1). A file is read again each
    time (it may change between runs of one process); it is cached while it stays the same file."""
    if text is None:
        return Traffic("nccl-tests:spread=1")
    if text.startswith(("moe:", "nccl-tests:")) or text in ("moe", "nccl-tests"):
        return _generator(text)
    try:
        st = os.stat(text)
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
    except (OSError, ValueError):
        stamp = None
    return _file(text, stamp)


@functools.lru_cache(maxsize=8)
def _file(path: str, stamp: tuple | None) -> Traffic:
    return Traffic(path, file_matrix=read_matrix(path))


@functools.lru_cache(maxsize=8)
def _generator(text: str) -> Traffic:
    if text.startswith("moe:") or text == "moe":
        values = _keys(text, "moe", MOE_DEFAULTS)
        experts, topk, skew, seed = (int(values["experts"]), int(values["topk"]), float(values["skew"]),
                                     int(values["seed"]))
        if not 1 <= experts <= MAX_EXPERTS:
            raise UsageError(f"--traffic {text}: experts={experts} must be between 1 and {MAX_EXPERTS}")
        if not 1 <= topk <= experts:
            raise UsageError(f"--traffic {text}: topk={topk} must be between 1 and experts ({experts})")
        if not (0.0 <= skew <= 10.0):
            raise UsageError(f"--traffic {text}: skew={skew:g} must be between 0 (balanced) and 10")
        if seed < 0:
            raise UsageError(f"--traffic {text}: seed={seed} must be 0 or more")
        return Traffic(text, moe=(experts, topk, skew, seed))
    if text.startswith("nccl-tests:") or text == "nccl-tests":
        spread = float(_keys(text, "nccl-tests", {"spread": 1.0})["spread"])
        if not 0.0 <= spread <= 1.0:
            raise UsageError(f"--traffic {text}: spread={spread:g} must be between 0 (uniform) and 1")
        return Traffic(text, spread=spread)


def _keys(text: str, kind: str, defaults: dict) -> dict:
    values = dict(defaults)
    body = text[len(kind) + 1:] if ":" in text else ""
    for part in filter(None, body.split(",")):
        key, eq, value = part.partition("=")
        if not eq or key.strip() not in defaults:
            raise UsageError(f"--traffic {text}: {part!r} is not one of " + ", ".join(f"{k}=..." for k in defaults))
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not math.isfinite(number) or (isinstance(defaults[key.strip()], int) and number != int(number)):
            raise UsageError(f"--traffic {text}: {key.strip()}={value!r} is not a "
                             + ("whole number" if isinstance(defaults[key.strip()], int) else "number"))
        values[key.strip()] = number
    return values


def read_matrix(path: str) -> traffic.Matrix:
    """A traffic matrix file (nccl-tests' whitespace form, CSV, or YAML) as integer cells."""
    shown = path if path.isprintable() else repr(path)
    if not os.path.isfile(path):
        raise UsageError(f"--traffic {shown}: no such file (or moe:..., nccl-tests:spread=S)")
    if os.path.getsize(path) > MAX_FILE_BYTES:
        raise UsageError(f"--traffic {shown}: larger than {MAX_FILE_BYTES >> 20} MiB; not a traffic matrix")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--traffic {shown}: cannot read it as text ({e.__class__.__name__})") from None
    if path.endswith((".yaml", ".yml")):
        rows = _yaml_rows(path, shown)
    else:  # nccl-tests' whitespace form or CSV: cells between commas and blanks, after any # comment
        rows = [re.split(r"[,\s]+", line.split("#", 1)[0].strip()) for line in text.splitlines()]
        rows = [r for r in rows if r != [""]]
    if not rows:
        raise UsageError(f"--traffic {shown}: no matrix in it")
    dim = len(rows)
    if dim > MAX_DIM:
        raise UsageError(f"--traffic {shown}: {dim} rows, more than {MAX_DIM}")
    out = []
    for i, row in enumerate(rows, 1):
        if len(row) != dim:
            raise UsageError(f"--traffic {shown}: row {i} has {len(row)} values; a square matrix of {dim} rows "
                             f"needs {dim}")
        cells = []
        for j, cell in enumerate(row, 1):
            try:
                value = Fraction(str(cell)) if not isinstance(cell, bool) else None
            except (TypeError, ValueError, ZeroDivisionError):
                value = None
            if value is None or value < 0:
                raise UsageError(f"--traffic {shown}: row {i} column {j}: {str(cell)[:40]!r} is not a "
                                 "non-negative number of bytes")
            cells.append(value)
        out.append(cells)
    if not any(map(any, out)):
        raise UsageError(f"--traffic {shown}: every cell is 0")
    # a matrix is a shape: fractional cells (shares, probabilities) kept exactly as integers by
    # their common denominator
    scale = math.lcm(*(c.denominator for row in out for c in row))
    return tuple(tuple(int(c * scale) for c in row) for row in out)


def _yaml_rows(path: str, shown: str) -> list:
    data = yamlfile.read(path, "--traffic")
    if isinstance(data, dict):
        data = data.get("matrix")
    if not isinstance(data, list) or not all(isinstance(r, list) for r in data):
        raise UsageError(f"--traffic {shown}: a YAML matrix is a list of rows (or `matrix:` holding one)")
    return data


@functools.lru_cache(maxsize=32)
def _moe(n: int, experts: int, topk: int, skew: float, seed: int) -> traffic.Matrix:
    """Tokens each rank routes to the experts on each rank (module docstring)."""
    rng = np.random.default_rng(seed)
    popularity = 1.0 / np.arange(1, experts + 1) ** skew
    popularity = popularity[rng.permutation(experts)]  # the hot experts anywhere, by the seed
    logp = np.log(popularity / popularity.sum())
    home = np.arange(experts) * n // experts  # expert e's rank
    cells = np.zeros((n, n), dtype=np.int64)
    for i in range(n):
        # K distinct experts per token, drawn by popularity: the K largest of log p + Gumbel noise
        # (TOKEN_CHUNK tokens at a time: a chunk's scores are TOKEN_CHUNK x experts floats)
        for _ in range(TOKENS_PER_RANK // TOKEN_CHUNK):
            scores = logp + rng.gumbel(size=(TOKEN_CHUNK, experts))
            chosen = np.argpartition(-scores, topk - 1, axis=1)[:, :topk] if topk < experts \
                else np.broadcast_to(np.arange(experts), (TOKEN_CHUNK, experts))
            cells[i] += np.bincount(home[chosen].ravel(), minlength=n)
    return tuple(tuple(int(v) for v in row) for row in cells)
