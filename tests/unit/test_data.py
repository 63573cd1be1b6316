import torch

from workloads.data import count_wrong, reduced, tolerance, values


def test_reductions_are_exact_small_integers():
    # Three ranks, sum: each element is the integer sum of the three contributions.
    parts = [values(r, 1, 0, 10, "sum", "int32").long() for r in range(3)]
    assert torch.equal(reduced(3, 1, 0, 10, "sum", "int32").long(), parts[0] + parts[1] + parts[2])
    prod = reduced(4, 2, 0, 10, "prod", "float32")
    assert set(prod.tolist()) <= {1.0, -1.0}
    mx = reduced(3, 0, 5, 7, "max", "bfloat16")
    assert torch.equal(mx, torch.stack([values(r, 0, 5, 7, "max", "bfloat16") for r in range(3)]).amax(0))


def test_values_depend_on_rank_iteration_and_position():
    a = values(0, 1, 0, 16, "none", "float32")
    assert not torch.equal(a, values(1, 1, 0, 16, "none", "float32"))
    assert not torch.equal(a, values(0, 2, 0, 16, "none", "float32"))
    assert torch.equal(values(0, 1, 4, 4, "none", "float32"), a[4:8])


def test_int8_sum_wraps_like_the_backend():
    # 200 ranks of values in [-2, 2] can leave int8's range; both sides wrap modulo 256.
    exact = sum(values(r, 0, 0, 64, "sum", "int8").long() for r in range(200))
    assert torch.equal(reduced(200, 0, 0, 64, "sum", "int8"), exact.to(torch.int8))


def test_count_wrong_finds_each_bad_element():
    expected = reduced(2, 1, 0, 100, "sum", "float32")
    out = expected.clone()
    assert count_wrong(out, expected, 0.0) == 0
    out[[3, 50, 99]] += 1
    assert count_wrong(out, expected, 0.0) == 3


def test_tolerance_only_beyond_exact_range():
    assert tolerance("float32", 8, "sum") == 0.0
    assert tolerance("bfloat16", 64, "sum") == 0.0  # |sum| <= 128 < 256
    assert tolerance("bfloat16", 1024, "sum") > 0.0
    assert tolerance("int8", 1024, "sum") == 0.0
    assert tolerance("float16", 4096, "max") == 0.0


def test_no_group_size_makes_a_reduction_constant():
    # A constant result would let a chunk on the wrong rank or a stale output pass the check.
    for n in (2, 4, 5, 10, 15, 22):
        for op in ("sum", "prod"):
            for it in (1, 2):
                r = reduced(n, it, 0, 66, op, "int32")
                assert len(set(r.tolist())) > 1, (n, op, it)
                assert not torch.equal(r, reduced(n, it + 1, 0, 66, op, "int32")), (n, op, it)
