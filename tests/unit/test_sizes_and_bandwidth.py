import pytest

from orchestrator.execution import stats
from orchestrator.sweep.sizes import BitUnit, format_bytes, parse_bytes, sweep
from tests.helpers import run_main
from workloads import registry


@pytest.mark.parametrize(
    "text, expected",
    [("8", 8), ("1K", 1024), ("64M", 64 << 20), ("1G", 1 << 30), ("2KiB", 2048), ("3kb", 3072), (512, 512),
     ("1GB", 1 << 30), ("1GiB", 1 << 30), ("1gb", 1 << 30), ("8B", 8)],  # as nccl-tests reads them: 1024s
)
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "1.5K", "-8", "K", "12Q", "1 M B"])
def test_parse_bytes_refuses(text):
    with pytest.raises(ValueError, match="not a byte size"):
        parse_bytes(text)


@pytest.mark.parametrize("text, said", [("1Gb", "1G, 1GB or 1GiB"), ("100Mb", "100M, 100MB or 100MiB"),
                                        ("8Mbit", "8M, 8MB or 8MiB"), ("8bits", "8, 8B")])
def test_a_size_in_bits_is_refused_with_the_byte_spellings(text, said):
    """Issue 45: `-e 1Gb` read as a gigabyte; b is a bit, as rates are written."""
    with pytest.raises(BitUnit) as e:
        parse_bytes(text)
    assert str(e.value) == f"a size in bits; sizes are bytes: {said}"
    proc = run_main(["plan", "--inventory", "1x2", "-e", text])
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"collbench: error: --max-bytes {text!r}: a size in bits; sizes are bytes: {said}\n"


def test_sweep_includes_both_ends():
    assert sweep(8, 128, 2) == [8, 16, 32, 64, 128]
    assert sweep(16, 16 << 20, 4)[-1] == 16 << 20
    assert sweep(8, 100, 4) == [8, 32]


def test_format_bytes():
    assert [format_bytes(b) for b in (512, 4096, 1 << 20, 3 << 29)] == ["512", "4K", "1M", "1.5G"]


# nccl-tests' factors (REFERENCE.md), exact for n = 2, 3, 8.
FACTORS = {
    "all_reduce": {2: 1.0, 3: 4 / 3, 8: 7 / 4},
    "all_gather": {2: 0.5, 3: 2 / 3, 8: 7 / 8},
    "reduce_scatter": {2: 0.5, 3: 2 / 3, 8: 7 / 8},
    "all_to_all": {2: 0.5, 3: 2 / 3, 8: 7 / 8},
    "all_to_allv": {2: 0.5, 3: 2 / 3, 8: 7 / 8},  # src/alltoallv.cu: (n-1)/n of the busiest rank's rate
    "broadcast": {2: 1.0, 3: 1.0, 8: 1.0},
    "reduce": {2: 1.0, 3: 1.0, 8: 1.0},
    "send_recv": {2: 1.0, 3: 1.0, 8: 1.0},
}


@pytest.mark.parametrize("name", list(FACTORS))
def test_busbw_factors_exact(name):
    for n, factor in FACTORS[name].items():
        assert registry.get(name).busbw_factor(n) == pytest.approx(factor, abs=1e-15)
    assert set(registry.names()) == set(FACTORS)


def test_bandwidth_arithmetic_by_hand():
    # 1 MiB in 1000 us: 1048576 B / 1e-3 s = 1.048576e9 B/s = 1.048576 GB/s.
    algbw = stats.algbw_gbps(1 << 20, 1000.0)
    assert algbw == pytest.approx(1.048576)
    # all_reduce on 3 ranks: busbw = algbw * 4/3.
    assert stats.busbw_gbps(algbw, registry.get("all_reduce").busbw_factor(3)) == pytest.approx(1.398101333)


def test_combine_takes_slowest_rank_per_iteration():
    out = stats.combine([[10.0, 30.0, 20.0, 40.0], [20.0, 10.0, 20.0, 50.0]])
    assert out["iter_time_us"] == [20.0, 30.0, 20.0, 50.0]
    assert out["time_us"] == 30.0
    assert out["time_us_min"] == 20.0 and out["time_us_max"] == 50.0
    assert out["time_us_p50"] == 25.0
    assert out["rank_time_us"] == [25.0, 25.0]
    # population std of [20, 30, 20, 50] is sqrt(150); cv = std / mean
    assert out["time_cv"] == pytest.approx(150**0.5 / 30)


@pytest.mark.parametrize(
    "name, msg_bytes, n, count",
    [("all_reduce", 1000, 3, 250), ("all_gather", 1000, 3, 249), ("reduce_scatter", 8, 3, 0), ("all_to_all", 64, 8, 16)],
)
def test_round_count_splits_by_group_size(name, msg_bytes, n, count):
    assert registry.round_count(name, msg_bytes, 4, n) == count
