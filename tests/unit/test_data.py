import pytest
import torch

from workloads import data
from workloads.data import ALL, Span, count_wrong, reduced, values, write


def _formula(rank: int, it: int, idx: int, op: str) -> int:
    """The documented integers, element by element, independently of the module's tensor code."""
    if op == "sum":
        extra = (idx * 5 + it) % 11 - 5 if rank == 0 else 0
        return (rank * 3 + idx + 7 * it) % 5 - 2 + extra
    if op == "prod":
        if rank == 0:
            return -1 if (idx + it) % 3 == 0 else 1
        return ((rank + idx + it) % 2) * 2 - 1
    return (rank * 131 + idx * 7 + it * 13) % 97 - 48


@pytest.mark.parametrize("op", ["sum", "prod", "max", "min", "none"])
def test_values_and_reductions_match_the_formula_across_periods(op):
    start, numel, n, it = 123, 500, 5, 2  # several periods, not aligned to one
    for rank in (0, 3):
        want = [_formula(rank, it, i, op) for i in range(start, start + numel)]
        assert values(rank, it, start, numel, op, "int32").tolist() == want
    if op != "none":
        combine = {"sum": sum, "max": max, "min": min,
                   "prod": lambda xs: -1 if sum(x < 0 for x in xs) % 2 else 1}[op]
        want = [combine([_formula(r, it, i, op) for r in range(n)]) for i in range(start, start + numel)]
        assert reduced(n, it, start, numel, op, "int32").tolist() == want


def test_reduction_over_thousands_of_ranks():
    # the reduction is computed per period over every rank, in steps of ranks: same answer
    n = 9000
    got = reduced(n, 1, 7, 60, "sum", "float64")
    want = [sum(_formula(r, 1, i, "sum") for r in range(n)) for i in range(7, 67)]
    assert got.tolist() == want


def test_values_depend_on_rank_iteration_and_position():
    a = values(0, 1, 0, 16, "none", "float32")
    assert not torch.equal(a, values(1, 1, 0, 16, "none", "float32"))
    assert not torch.equal(a, values(0, 2, 0, 16, "none", "float32"))
    assert torch.equal(values(0, 1, 4, 4, "none", "float32"), a[4:8])


def test_int8_sum_wraps_like_the_backend():
    # 200 ranks of values in [-2, 2] can leave int8's range; both sides wrap modulo 256.
    exact = sum(values(r, 0, 0, 64, "sum", "int8").long() for r in range(200))
    assert torch.equal(reduced(200, 0, 0, 64, "sum", "int8"), exact.to(torch.int8))


def test_write_fills_spans_and_leaves_the_rest(monkeypatch):
    buf = torch.full((300,), 77.0)
    write(buf, [Span(10, 100, 2, 50), Span(200, 40, ALL, 5)], 3, 1, "sum", "float32")
    assert torch.equal(buf[10:110], values(2, 1, 50, 100, "sum", "float32"))
    assert torch.equal(buf[200:240], reduced(3, 1, 5, 40, "sum", "float32"))
    assert (buf[:10] == 77).all() and (buf[110:200] == 77).all() and (buf[240:] == 77).all()


def test_count_wrong_finds_each_bad_element_chunk_by_chunk(monkeypatch):
    monkeypatch.setattr(data, "CHECK_CHUNK", 1000)  # many chunks, and a partial last period
    n, numel = 3, 10_007
    spans = [Span(0, numel, ALL, 0)]
    out = reduced(n, 1, 0, numel, "sum", "float32")
    assert count_wrong(out, spans, n, 1, "sum", "float32") == 0
    out[[3, 999, 1000, 5_000, numel - 1]] += 1
    assert count_wrong(out, spans, n, 1, "sum", "float32") == 5
    assert count_wrong(out, spans, n, 2, "sum", "float32") > numel // 2  # another iteration's data


def test_float8_outputs_are_compared():
    n, it = 2, 1
    out = reduced(n, it, 0, 200, "max", "float8_e4m3")
    spans = [Span(0, 200, ALL)]
    assert count_wrong(out, spans, n, it, "max", "float8_e4m3") == 0
    out[7] = 0.0 if out[7].float() != 0 else 1.0
    assert count_wrong(out, spans, n, it, "max", "float8_e4m3") == 1


def test_sums_stay_exact_in_every_partial_sum_and_order():
    """Where 2n+5 leaves a type's exact integers, a sum's inputs are sparse: every partial sum of
    any subset of ranks (what a ring or a tree forms, in any order) is an exact integer of the
    type, so the check compares exactly. Checked on every element of a period, against the
    worst subsets: all the positive or all the negative contributions of an element."""
    from workloads.data import _EXACT_INT, sparse_stride

    for dtype, sizes in (("float8_e5m2", (2, 8, 16, 64, 300)), ("float8_e4m3", (6, 16, 64, 1000)),
                         ("bfloat16", (126, 1024)), ("float16", (1022, 4096))):
        limit = _EXACT_INT[dtype]
        for n in sizes:
            stride = sparse_stride("sum", n, dtype)
            assert stride >= 1, (dtype, n)
            for it in (1, 2):
                own = torch.stack([values(r, it, 0, 55 * stride, "sum", dtype, n=n).float() for r in range(n)])
                contributions = own.to(torch.int64)
                assert torch.equal(contributions.float(), own)  # integers, each in -1..1
                assert int(contributions.abs().max()) == 1
                positive = contributions.clamp(min=0).sum(0)
                negative = contributions.clamp(max=0).sum(0)
                assert int(positive.max()) <= limit and int(negative.min()) >= -limit, (dtype, n)
                total = reduced(n, it, 0, 55 * stride, "sum", dtype)
                assert torch.equal(total.float(), contributions.sum(0).float())  # exact, and what was cast
                assert len(set(total.float().tolist())) > 1  # not the same value everywhere
    assert sparse_stride("sum", 8, "float32") == 0 and sparse_stride("max", 64, "float8_e5m2") == 0
    assert sparse_stride("sum", 5, "float8_e4m3") == 0  # 2*5+5 = 15 <= 16: the dense inputs


def test_no_group_size_makes_a_reduction_constant():
    # A constant result would let a chunk on the wrong rank or a stale output pass the check.
    for n in (2, 4, 5, 10, 15, 22):
        for op in ("sum", "prod"):
            for it in (1, 2):
                r = reduced(n, it, 0, 66, op, "int32")
                assert len(set(r.tolist())) > 1, (n, op, it)
                assert not torch.equal(r, reduced(n, it + 1, 0, 66, op, "int32")), (n, op, it)

