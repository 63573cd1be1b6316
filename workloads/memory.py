"""What one size of a collective needs in memory, torch-free: the driver's checks (before any
actor starts, and on the probe's node) and the harness (before it allocates) use the same numbers.

A rank holds one size at a time: its send and receive buffers (one buffer in place), what the
backend allocates for the call (gloo's all_gather and reduce_scatter: one more), and while
checking, a mask byte per compared element, at most CHECK_CHUNK at a time, and the count of a
mask that shows a mismatch (COUNT_CHUNK elements at a time). On a GPU, NCCL may
still allocate after the free memory is read: the headroom per GPU generation.
"""

from __future__ import annotations

from workloads.dtypes import ELEMENT_BYTES
from workloads.registry import Collective, Ctx

# Elements compared at a time: the check's temporary (a mask) stays this small whatever the size.
CHECK_CHUNK = 1 << 22
# Mask elements counted at a time where a chunk has a mismatch: counting costs 9 bytes per element on
# CUDA (`count_nonzero` is `(x != 0).sum()`, and the sum reduces through an int64 copy).
COUNT_CHUNK = CHECK_CHUNK // 16
COUNT_BYTES_PER_ELEMENT = 1 + 8

# What NCCL may still allocate on a GPU after the free memory is read: connections it makes on the
# first use of an algorithm or peer (NCCL_RUNTIME_CONNECT, the default from 2.22). NVLink SHARP
# buffers, possible from Hopper (9.0) on NVSwitch systems, took 1.6 GB in a published H800 log.
NCCL_HEADROOM_BYTES = {(9, 0): 2 << 30, (0, 0): 512 << 20}  # by the lowest compute capability it applies to


def check_scratch_bytes(numel: int = CHECK_CHUNK) -> int:
    """Peak temporary bytes of the check (workloads.data.count_wrong) of `numel` output elements: a
    mask byte per element compared at once, and where the mask shows a mismatch, what counting one
    COUNT_CHUNK of it takes."""
    return min(numel, CHECK_CHUNK) + min(numel, COUNT_CHUNK) * COUNT_BYTES_PER_ELEMENT


def peak_bytes(coll: Collective, c: Ctx, backend: str, check: bool) -> int:
    """One rank's peak for one size: its buffers, what the backend allocates for the call, and the
    check's temporaries (tests/integration/test_memory.py measures it on CPU)."""
    need = (coll.buffer_numel(c) + coll.backend_numel(c, backend)) * ELEMENT_BYTES[c.dtype]
    if not check:
        return need
    return need + check_scratch_bytes(coll.recv_numel(c))


def headroom_bytes_for(cc: tuple[int, int]) -> int:
    """NCCL_HEADROOM_BYTES for GPUs of compute capability `cc`."""
    return next(v for floor, v in sorted(NCCL_HEADROOM_BYTES.items(), reverse=True) if cc >= floor)
