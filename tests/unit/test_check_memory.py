"""The check's temporaries as CUDA allocates them, on CPU tensors: a dispatch mode charges each
operator what its CUDA kernel allocates beside its outputs, and the check's peak must stay within
`check_scratch_bytes`, the term the memory estimate (and the GPU check's peak-against-estimate
verdict) gives it.

What CUDA allocates, read from PyTorch's source (aten/src/ATen/native/ReduceOps.cpp, TensorCompare):
`count_nonzero` on CUDA is `(self != 0).sum(dims)`: a bool mask of the input's size, then a sum
whose `make_reduction` casts a bool input to int64 (kLong) first (pytorch issue 55366), 1 + 8 bytes
per element; `sum` of a bool tensor likewise 8 bytes per element; `any`/`all` reduce a bool input
as it is (their out type is bool), no copy. Every other operator: only its outputs.
"""

from __future__ import annotations

import weakref

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from workloads import data
from workloads.data import count_wrong, reduced
from workloads.memory import CHECK_CHUNK, COUNT_CHUNK, check_scratch_bytes
from workloads.registry import ALL, Span

aten = torch.ops.aten
# the expected pattern (a period of a few dozen elements) and one-element results: bytes, not the size's
SMALL_BYTES = 4096


def _numel(args) -> int:
    return max((t.numel() for t in pytree.tree_leaves(args) if isinstance(t, torch.Tensor)), default=0)


def cuda_transient_bytes(func, args) -> int:
    """What the CUDA kernel of `func` allocates for itself while it runs (beyond its outputs)."""
    if func in (aten.count_nonzero.default, aten.count_nonzero.dim_IntList):
        return 9 * _numel(args)
    if func in (aten.sum.default, aten.sum.dim_IntList) and args[0].dtype == torch.bool:
        return 8 * _numel(args)
    return 0


class CudaMemoryModel(TorchDispatchMode):
    """The peak of bytes alive in tensors made under the mode, plus each kernel's own temporaries."""

    def __init__(self) -> None:
        super().__init__()
        self.live_bytes = 0
        self.peak_bytes = 0

    def _release(self, nbytes: int) -> None:
        self.live_bytes -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        # a view shares an input's storage: only new storages are allocations
        old = {a.untyped_storage().data_ptr() for a in pytree.tree_leaves((args, kwargs))
               if isinstance(a, torch.Tensor)}
        made = list({t.untyped_storage().data_ptr(): t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)
                     and t.untyped_storage().data_ptr() not in old}.values())
        size = sum(t.untyped_storage().nbytes() for t in made)
        self.peak_bytes = max(self.peak_bytes, self.live_bytes + size + cuda_transient_bytes(func, args))
        for t in made:
            nbytes = t.untyped_storage().nbytes()
            self.live_bytes += nbytes
            weakref.finalize(t, self._release, nbytes)
        return out


def _peak_of_check(out: torch.Tensor, n: int) -> int:
    spans = [Span(0, out.numel(), ALL, 0)]
    with CudaMemoryModel() as model:
        wrong = count_wrong(out, spans, n, 1, "sum", "float32")
    return wrong, model.peak_bytes


def test_the_model_charges_what_cuda_charges():
    mask = torch.ones(1000, dtype=torch.bool)
    with CudaMemoryModel() as model:
        torch.count_nonzero(mask)
    assert model.peak_bytes >= 9 * 1000
    with CudaMemoryModel() as model:
        mask.any()
    assert model.peak_bytes < 100


def test_the_check_stays_within_its_estimate_with_and_without_mismatches():
    numel = 2 * CHECK_CHUNK + 12_345  # several chunks and a partial one
    out = reduced(3, 1, 0, numel, "sum", "float32")
    wrong, peak = _peak_of_check(out, 3)
    assert wrong == 0 and peak <= check_scratch_bytes(numel) + SMALL_BYTES, (peak, check_scratch_bytes(numel))
    bad = [0, COUNT_CHUNK - 1, COUNT_CHUNK, CHECK_CHUNK + 5, numel - 1]
    out[bad] += 1
    wrong, peak = _peak_of_check(out, 3)
    assert wrong == len(bad)
    assert peak <= check_scratch_bytes(numel) + SMALL_BYTES, (peak, check_scratch_bytes(numel))
    # a small output: the estimate follows its size
    small = reduced(3, 1, 0, 1000, "sum", "float32")
    small[3] += 1
    wrong, peak = _peak_of_check(small, 3)
    assert wrong == 1 and peak <= check_scratch_bytes(1000) + SMALL_BYTES


def test_counting_a_whole_mask_would_exceed_the_estimate(monkeypatch):
    """The check before this fix counted each CHECK_CHUNK mask with count_nonzero: 10 bytes per
    element on CUDA, against the 1-byte mask the estimate allowed; the model catches it."""
    def whole_mask_count(out, expected):
        return int(torch.count_nonzero(out != expected))

    monkeypatch.setattr(data, "_mismatches", whole_mask_count)
    out = reduced(3, 1, 0, CHECK_CHUNK, "sum", "float32")
    _, peak = _peak_of_check(out, 3)
    assert peak > check_scratch_bytes(CHECK_CHUNK) + (2 << 20)
