"""--traffic: all_to_allv's matrix from a file (nccl-tests' form, CSV, YAML), a seeded MoE router, or
nccl-tests' generated pattern; scaled per size with integer cells; bad input refused in one line."""

from __future__ import annotations

import pytest

from orchestrator.errors import UsageError
from orchestrator.sweep import traffic as tv
from orchestrator.sweep.inventory import from_description
from orchestrator.sweep.planner import build_cases, check_plan, make_plan
from orchestrator.sweep.spec import SweepSpec
from workloads import traffic

# nccl-tests' own example (src/alltoallv.cu, "Example matrix file (3 ranks)")
NCCL_TESTS_EXAMPLE = "100  200  150\n50   100  75\n300  150  200\n"


def test_a_matrix_file_reads_in_every_form_to_the_same_cells(tmp_path):
    want = ((100, 200, 150), (50, 100, 75), (300, 150, 200))
    (tmp_path / "m.txt").write_text(NCCL_TESTS_EXAMPLE)
    (tmp_path / "m.csv").write_text("# bytes\n100,200,150\n50,100,75\n300,150,200\n")
    (tmp_path / "m.yaml").write_text("matrix:\n  - [100, 200, 150]\n  - [50, 100, 75]\n  - [300, 150, 200]\n")
    for name in ("m.txt", "m.csv", "m.yaml"):
        t = tv.parse(str(tmp_path / name))
        assert t.for_ranks(3) == want and t.source.endswith(name)
        assert t.for_ranks(2) == ((100, 200), (50, 100))  # a smaller group: the first rows and columns
    with pytest.raises(UsageError, match=r"a 3x3 matrix, and the plan has a group of 4 ranks"):
        tv.parse(str(tmp_path / "m.txt")).for_ranks(4)


@pytest.mark.parametrize("text, said", [
    ("1 2\n3\n", "row 2 has 1 values; a square matrix of 2 rows needs 2"),
    ("1 -2\n3 4\n", "row 1 column 2: '-2' is not a non-negative number of bytes"),
    ("1 x\n3 4\n", "row 1 column 2: 'x' is not a non-negative number"),
    ("1 nan\n3 4\n", "row 1 column 2: 'nan'"),
    ("0 0\n0 0\n", "every cell is 0"),
    ("\n\n", "no matrix in it"),
])
def test_a_bad_matrix_file_is_refused_naming_the_cell(tmp_path, text, said):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(UsageError, match="--traffic .*bad.txt: ") as e:
        tv.parse(str(path))
    assert said in str(e.value) and "\n" not in str(e.value)


def test_comments_fractions_and_a_changed_file_read_as_they_are(tmp_path):
    path = tmp_path / "m.txt"
    path.write_text("# rows, as shares\n0.25 0.75\n0.5, 0.5  # a CSV row\n")
    t = tv.parse(str(path))
    assert t.for_ranks(2) == ((1, 3), (2, 2))  # exact: scaled by the common denominator
    path.write_text("1 0\n0 1\n")  # the same path, a new matrix: read again, not the cached one
    assert tv.parse(str(path)).for_ranks(2) == ((1, 0), (0, 1))
    path.write_text("0 0 5\n0 0 5\n5 5 0\n")
    with pytest.raises(UsageError, match="its first 2 rows and columns .* are all 0"):
        tv.parse(str(path)).for_ranks(2)
    (tmp_path / "b.yaml").write_text("- [true, 1]\n- [1, 1]\n")
    with pytest.raises(UsageError, match="row 1 column 1: 'True' is not a non-negative number"):
        tv.parse(str(tmp_path / "b.yaml"))


def test_sizes_too_small_for_any_cell_are_not_measured():
    # 4 ranks, spread 1: each rank sends 1/6, 2/6, 3/6 of its total; one element fills no cell
    spec = SweepSpec(collectives=("all_to_allv",), min_bytes=4, max_bytes=2048, step_factor=8)
    (case,) = build_cases(spec, 4)
    assert case.counts == (8, 64, 512) and traffic.busiest_numel(case.traffic, 1) == 0


def test_binary_and_missing_files_are_refused(tmp_path):
    (tmp_path / "junk.bin").write_bytes(b"\xff\xfe\x00\x81" * 100)
    with pytest.raises(UsageError, match="cannot read it as text"):
        tv.parse(str(tmp_path / "junk.bin"))
    with pytest.raises(UsageError, match="no such file"):
        tv.parse(str(tmp_path / "nothing.txt"))


@pytest.mark.parametrize("text, said", [
    ("moe:experts=0", "experts=0 must be between 1"),
    ("moe:experts=8,topk=9", "topk=9 must be between 1 and experts (8)"),
    ("moe:skew=-1", "skew=-1 must be between 0"),
    ("moe:topk=2.5", "topk='2.5' is not a whole number"),
    ("moe:experts=8,tokens=3", "'tokens=3' is not one of experts=..., topk=..., skew=..., seed=..."),
    ("nccl-tests:spread=2", "spread=2 must be between 0 (uniform) and 1"),
])
def test_bad_generator_keys_are_refused(text, said):
    with pytest.raises(UsageError) as e:
        tv.parse(text)
    assert said in str(e.value)


def test_the_moe_router_is_seeded_routes_topk_tokens_per_rank_and_its_skew_concentrates_traffic():
    def matrix(skew, seed=1):
        return tv.parse(f"moe:experts=64,topk=4,skew={skew},seed={seed}").for_ranks(8)

    m = matrix(1.0)
    assert m == matrix(1.0) and m != matrix(1.0, seed=2)  # the same text, the same matrix (every node)
    assert all(sum(row) == tv.TOKENS_PER_RANK * 4 for row in m)  # each token to 4 distinct experts
    def hottest_share(m):  # the busiest receiver's share of all tokens
        return max(sum(row[j] for row in m) for j in range(8)) / sum(map(sum, m))
    balanced, skewed = hottest_share(matrix(0.0)), hottest_share(matrix(2.0))
    assert balanced < 1 / 8 * 1.1  # 8 experts per rank, equally popular: about an eighth each
    assert skewed > 2 * balanced  # a few hot experts: their ranks receive far more
    # fewer experts than ranks: ranks without an expert receive nothing
    few = tv.parse("moe:experts=2,topk=1,seed=0").for_ranks(4)
    assert [sum(row[j] for row in few) for j in range(4)].count(0) == 2


def test_nccl_tests_generated_pattern_and_scaling():
    # spread 1 on 4 ranks: shares of distance 1, 2, 3 out of 6; the diagonal sends nothing
    m = traffic.generated(4)
    assert m[0][0] == 0 and [round(6 * w / traffic.SPREAD_SCALE) for w in m[0][1:]] == [1, 2, 3]
    assert traffic.generated(4, 0.0)[1] == (traffic.SPREAD_SCALE // 4,) * 4  # uniform
    # scaled: the busiest rank moves at most count elements, cells are floors of their share
    c = traffic.counts(((5, 0, 1), (0, 0, 7), (3, 0, 2)), 1000)
    # rank 2 receives 1 + 7 + 2 = 10 units, more than any rank sends: 100 elements per unit
    assert c == ((500, 0, 100), (0, 0, 700), (300, 0, 200))
    assert traffic.busiest_numel(((5, 0, 1), (0, 0, 7), (3, 0, 2)), 1000) == 1000
    assert traffic.busiest_numel(((1, 2), (2, 0)), 1000) == 999  # 3 units: 333 each, floored


def test_the_spec_and_the_plan_give_all_to_allv_its_matrix_per_group_size(tmp_path):
    with pytest.raises(UsageError, match="--traffic moe:experts=8: only all_to_allv takes a traffic matrix"):
        SweepSpec(traffic="moe:experts=8")
    with pytest.raises(UsageError, match="topk=9"):
        SweepSpec(collectives=("all_to_allv",), traffic="moe:experts=8,topk=9")
    assert "all_to_allv" not in SweepSpec().collectives  # not in the default sweep
    spec = SweepSpec(collectives=("all_to_allv",), traffic="moe:experts=16,topk=2,skew=1,seed=5")
    (case,) = build_cases(spec, 4)
    assert case.traffic == tv.parse(spec.traffic).for_ranks(4) and case.traffic_source == spec.traffic
    assert not case.in_place and case.op == "none"
    (plain,) = build_cases(SweepSpec(collectives=("all_to_allv",)), 3)
    assert plain.traffic == traffic.generated(3) and plain.traffic_source == "nccl-tests:spread=1"
    # a matrix file smaller than the plan's largest group is refused before anything runs
    (tmp_path / "m.txt").write_text(NCCL_TESTS_EXAMPLE)
    small = SweepSpec(collectives=("all_to_allv",), traffic=str(tmp_path / "m.txt"), patterns=("intra",))
    with pytest.raises(UsageError, match="a 3x3 matrix, and the plan has a group of 4 ranks"):
        check_plan(small, make_plan(small, from_description("2x4")))
