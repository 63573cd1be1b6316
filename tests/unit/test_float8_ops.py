"""float8 buffers as a GPU has them: the harness' fill and check run, for every float8 type and
every collective, under a dispatch mode that refuses every operator CUDA lacks for float8.

What CUDA implements for float8 (PyTorch's aten/src/ATen/native/cuda): allocation and views (no
kernel), `fill_` (FillKernel.cu dispatches the float8 types), copies and casts to and from float8
(Copy.cu, `float8_copy_kernel_cuda` and the dynamic-cast copy). Not `roll` (`roll_cuda` in
TensorTransformations.cu dispatches all types plus Half, Bool, BFloat16, ComplexHalf), and not
comparisons or arithmetic in every torch release this project supports. CPU tensors stand in for
the device: a refused operator fails here as it would fail on an H100.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from workloads import data, harness, registry
from workloads.data import SENTINEL, TORCH_DTYPES, sparse_stride, values
from workloads.messages import Case
from workloads.registry import Ctx

aten = torch.ops.aten

FLOAT8_DTYPES = ("float8_e4m3", "float8_e5m2")
_FLOAT8 = {TORCH_DTYPES[d] for d in FLOAT8_DTYPES}

CUDA_FLOAT8_OPS = frozenset({
    # allocation and views: no kernel runs
    aten.empty.memory_format, aten.empty_strided.default, aten.empty_like.default,
    aten.view.default, aten.view.dtype, aten._unsafe_view.default, aten.slice.Tensor, aten.select.int,
    aten.as_strided.default, aten.expand.default, aten.alias.default, aten.detach.default,
    # kernels with float8 cases: fill, copy, cast
    aten.fill_.Scalar, aten.copy_.default, aten._to_copy.default, aten.clone.default,
})


class Float8AsOnCuda(TorchDispatchMode):
    """Refuses any operator outside CUDA_FLOAT8_OPS that reads or makes a float8 tensor."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in CUDA_FLOAT8_OPS and _has_float8((args, kwargs), kwargs.get("dtype")):
            raise NotImplementedError(f"{func} has no float8 kernel on CUDA")
        out = func(*args, **kwargs)
        if func not in CUDA_FLOAT8_OPS and _has_float8(out):  # made float8 from other types
            raise NotImplementedError(f"{func} has no float8 kernel on CUDA")
        return out


def _has_float8(tree, dtype: torch.dtype | None = None) -> bool:
    return dtype in _FLOAT8 or any(isinstance(t, torch.Tensor) and t.dtype in _FLOAT8 for t in pytree.tree_leaves(tree))


def test_the_mode_refuses_what_cuda_lacks():
    x, y = torch.zeros(8, dtype=torch.float8_e4m3fn), torch.ones(8, dtype=torch.float8_e4m3fn)
    with Float8AsOnCuda():
        for refused in (lambda: torch.roll(x, 1), lambda: x != y, lambda: torch.eq(x, y), lambda: x + x, lambda: x.sum(),
                        lambda: x.abs(), lambda: torch.count_nonzero(x)):
            with pytest.raises(NotImplementedError, match="has no float8 kernel"):
                refused()
        x.fill_(3)
        assert x.float().tolist() == [3.0] * 8  # a cast is allowed, and what it reads is right
        assert x.view(torch.uint8).tolist() == [0x44] * 8  # 3 = 1.5 * 2^1 in e4m3fn: 0 1000 100


def _cases():
    for name in registry.names():
        coll = registry.get(name)
        for dtype in FLOAT8_DTYPES:
            for op in ("sum", "max", "min", "prod") if coll.reduces else ("none",):
                for n in (2, 8):
                    for in_place in coll.in_place_modes:
                        yield pytest.param(name, dtype, op, n, in_place, id=f"{name}-{dtype}-{op}-n{n}-{in_place}")


@pytest.mark.parametrize("name, dtype, op, n, in_place", list(_cases()))
def test_fill_and_check_use_only_what_cuda_has_for_float8(name, dtype, op, n, in_place):
    coll = registry.get(name)
    device = torch.device("cpu")
    # 61 elements per rank: partial periods (55, 6, 97) and chunks that do not start at 0
    c = Ctx(rank=n - 1, n=n, count=registry.round_count(name, 61 * n, 1, n), dtype=dtype, op=op, root=0,
            in_place=in_place)
    case = Case(name, dtype, op, in_place, (c.count,), iters=1, warmup=0, check_iters=3)
    expected = coll.expected(c)
    calls = {"it": 0}

    def correct() -> None:
        # what a backend leaves in the receive buffer for this check iteration (harness.check
        # fills iteration 1, 2, 3 in turn before each call)
        calls["it"] += 1
        if expected is not None:
            data.write(recv, expected, n, calls["it"], op, dtype)

    def one_wrong() -> None:
        correct()
        if expected is not None:
            recv[expected[0].at : expected[0].at + 1].fill_(SENTINEL)

    with Float8AsOnCuda():
        send, recv = harness.buffers(coll, c, device)
        harness.fill(coll, c, send, recv, it=1)
        written = send.clone()
        assert harness.check(coll, c, send, recv, correct, case, device) == 0
        calls["it"] = 0
        assert harness.check(coll, c, send, recv, one_wrong, case, device) == (3 if expected else 0)
    # the float8 inputs are the exact integers cast (bit for bit), where the inputs lie
    for span in coll.inputs(c):
        want = values(span.source, 1, span.start, span.numel, op, "int32", n=n)
        if sparse_stride(op, n, dtype):  # int64 is dense: the sparse integers are the float8 path's own
            want = values(span.source, 1, span.start, span.numel, op, dtype, n=n).float().to(torch.int64)
        got = written[span.at : span.at + span.numel]
        assert torch.equal(got.view(torch.uint8), want.to(TORCH_DTYPES[dtype]).view(torch.uint8))
    if op == "sum" and (n == 8 or dtype == "float8_e5m2"):
        assert sparse_stride(op, n, dtype) > 0  # these cases went through the sparse inputs
