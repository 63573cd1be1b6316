"""The one judge (orchestrator/judging/judge.py): leave-one-out references, the prior pooled with
the data, the 3x rule where it is safe, a prior alone, the regimes (judging/regime.py), and what
cannot be judged."""

from __future__ import annotations

import math

import numpy as np
import pytest

from orchestrator.judging.judge import (
    GROSS_DROP,
    GROSS_SIGMAS,
    LATENCY_PRIORS,
    PLAUSIBLE_ALPHA,
    PRIORS,
    Source,
    gross_applies,
    grouped_leave_one_out_medians,
    leave_one_out_medians,
    limit,
    peer_arrays,
    prior_for,
)
from orchestrator.judging.regime import Regime, latency_bound
from orchestrator.judging.stats import quantile

CPU, NET, GPU = PRIORS[("gloo", False)], PRIORS[("gloo", True)], PRIORS[("nccl", False)]
LATENCY = LATENCY_PRIORS[("gloo", False)]


@pytest.mark.parametrize("n", [3, 4, 5, 6, 9, 40])
def test_leave_one_out_medians_are_the_others_medians(n):
    rng = np.random.default_rng(n)
    v = rng.normal(size=n)
    v[1] = v[2]  # ties too
    assert np.allclose(leave_one_out_medians(v), [np.median(np.delete(v, i)) for i in range(n)])


def test_four_cpu_links_flag_a_10x_drop_and_not_a_30_percent_wobble():
    judged = peer_arrays(np.array([1.0, 1.3, 0.77, 0.1]), CPU)
    assert judged.low.tolist() == [False, False, False, True]
    assert judged.reference[3] == pytest.approx(1.0)  # the others' median: the judged value left out
    wobble = peer_arrays(np.array([1.0, 1.3, 0.77, 0.7]), CPU)
    assert not wobble.low.any()


def test_a_3x_drop_is_never_noise_where_the_spread_makes_it_safe():
    """The 3x rule holds where 3x lies GROSS_SIGMAS sigmas of the regime's measured spread out, in a
    normal's tail probability under the regime's own tails (the host's bandwidth-bound links, 0.30),
    not for values that move by factors (latency-bound sizes of a shared host, t(6) tails, issue 42),
    nor for a measurement contended enough to widen its regime's spread past it."""
    assert gross_applies(CPU.sigma_log) and not gross_applies(LATENCY.sigma_log, LATENCY.tail_df)
    assert gross_applies(math.log(GROSS_DROP) / GROSS_SIGMAS) and not gross_applies(math.log(GROSS_DROP) / 2.9)
    assert limit(CPU, 99, sigma_data=0.25, df_data=1.0).log_drop == pytest.approx(math.log(GROSS_DROP))
    assert limit(LATENCY, 99, sigma_data=0.25, df_data=1.0).log_drop > math.log(GROSS_DROP)
    # three peers that agree: a value 3x below them is low however wide the others' t quantile
    judged = peer_arrays(np.array([1.0, 1.2, 0.85, 1.0 / GROSS_DROP / 1.01]), CPU)
    assert judged.low.tolist() == [False, False, False, True]
    # the regime's measured spread decides, not the peers at hand: 8x disagreement does not lift it
    assert limit(CPU, 3, sigma_data=2.0, df_data=1.0).log_drop == pytest.approx(math.log(GROSS_DROP))
    assert peer_arrays(np.array([1.0, 2.5, 0.3, 0.6 / GROSS_DROP / 1.01]), CPU).low[-1]
    # a contended measurement's wider spread lifts it too
    assert limit(CPU, 99, sigma_data=0.25, df_data=1.0, widen=2.0).log_drop > math.log(GROSS_DROP)


def test_a_prior_alone_flags_only_beyond_plausible_noise():
    alone = limit(GPU, 10)
    assert alone.source is Source.PRIOR
    assert alone.log_drop == pytest.approx(quantile(1 - PLAUSIBLE_ALPHA / 10, None) * GPU.sigma_log)  # 3.7% x 4.4
    assert limit(LATENCY, 10).log_drop == pytest.approx(quantile(1 - PLAUSIBLE_ALPHA / 10, 6.0) * LATENCY.sigma_log)
    with_data = limit(GPU, 10, sigma_data=GPU.sigma_log, df_data=0.37)  # one value: the usual alpha
    assert with_data.source is Source.PEERS and with_data.log_drop < alone.log_drop


def test_each_regime_has_its_prior():
    assert prior_for("gloo", False, Regime.LATENCY) == LATENCY and prior_for("gloo", False) == CPU
    assert prior_for("nccl", True, Regime.LATENCY) == LATENCY_PRIORS[("nccl", True)]
    for key, bandwidth in PRIORS.items():
        assert LATENCY_PRIORS[key].sigma_log > bandwidth.sigma_log and LATENCY_PRIORS[key].source


def test_the_prior_decides_small_shapes_and_the_data_large_ones():
    # one link, no peers: the prior alone (a GPU's 4% says a 24% drop is one; a CPU's 30% does not)
    assert limit(GPU, 1).source is Source.PRIOR and limit(GPU, 1).floor > 0.76
    assert limit(CPU, 1).floor < 0.76
    # 256 quiet links (1% spread) read their own noise: the floor rises well above the prior's
    many = limit(CPU, 256, sigma_data=0.01, df_data=0.37 * 255)
    assert many.floor > 0.8 > 0.5 > limit(CPU, 256).floor and many.source is Source.PEERS


def test_fewer_than_three_values_are_unjudged():
    judged = peer_arrays(np.array([1.0, 0.01]), GPU)
    assert not judged.judged and not judged.low.any()


def test_the_prior_follows_the_platform():
    assert prior_for("gloo", False) == CPU and prior_for("gloo", True) == NET and prior_for("nccl", True) == GPU
    assert prior_for(None, False) == CPU  # unknown: the widest


def test_grouped_leave_one_out_medians_are_each_groups_own():
    rng = np.random.default_rng(4)
    groups = np.repeat(np.arange(40), rng.integers(1, 9, 40))
    rng.shuffle(groups)
    values = rng.lognormal(0, 1, len(groups))
    got = grouped_leave_one_out_medians(groups, values)
    for i in range(len(values)):
        others = values[(groups == groups[i]) & (np.arange(len(values)) != i)]
        if len(others):
            assert got[i] == pytest.approx(np.median(others))
        else:
            assert np.isnan(got[i])


def test_the_regime_rule_on_rows_of_known_times():
    """t = 200 us + msg_bytes / (800 bytes/us): the bandwidth term passes the latency at 160 KB, so
    16 B .. 64 KiB are latency-bound and 256 KiB .. 16 MiB are not; small sizes 7x slower in a
    busy moment stay latency-bound, and a link slowed 4x keeps its regime where its faster side
    is read (compare reads the faster of its two runs)."""
    sizes = np.array([16 << (2 * k) for k in range(11)], dtype=float)  # 16 B .. 16 MiB
    t = 200.0 + sizes / 800.0
    expected = sizes < 160_000
    assert latency_bound(np.zeros(11), sizes, t).tolist() == expected.tolist()
    noisy = np.where(sizes <= 1024, t * 7, t)
    assert latency_bound(np.zeros(11), sizes, noisy).tolist() == expected.tolist()
    # two curves side by side, one of them 10x faster at every size: each read on its own
    both = latency_bound(np.repeat([0, 1], 11), np.tile(sizes, 2), np.r_[t, (20.0 + sizes / 8000.0)])
    assert both[:11].tolist() == expected.tolist() and both[11:].tolist() == (sizes < 160_000).tolist()
    # a sweep that starts where bytes dominate (a shaped link at 1 and 4 MiB: 22 and 88 ms, 0.3 ms of
    # latency) has no latency-bound size, though 1 MiB took less than twice the curve's smallest time
    lab = latency_bound(np.zeros(2), np.array([1 << 20, 4 << 20]), np.array([22_300.0, 88_100.0]))
    assert lab.tolist() == [False, False]
    # one size alone, and times that say nothing, are bandwidth-bound
    assert latency_bound(np.array(["a"]), np.array([16.0]), np.array([1000.0])).tolist() == [False]
    assert latency_bound(np.zeros(2), np.array([16.0, 64.0]), np.array([np.nan, 0.0])).tolist() == [False, False]


def test_the_one_allowed_drop_under_each_callers_knobs():
    """Issue 43: qualify's pairs and gates, the report's peers and compare each applied the judge's
    floor with a formula of their own; one rule now, their knobs as arguments. Its values on a grid
    are the callers' old formulas exactly."""
    import numpy as np

    from orchestrator.judging.judge import allowed_drop

    floors, thresholds = np.linspace(0.3, 0.999, 57), (0.01, 0.05, 0.1, 0.25)
    for t in thresholds:
        for f in floors:
            assert allowed_drop(f, t) == pytest.approx(1 - min(f, 1 - t), abs=1e-12)  # qualify pairs, report
            gate = 1 - min(2 * (1 - min(f, 1 - t)), 0.45)  # qualify's gates before
            assert 1 - allowed_drop(f, t, scale=2.0, cap=0.45) == pytest.approx(gate, abs=1e-12)
        noise = -np.log(floors)  # compare: flagged where change < -t and d > noise
        d = np.linspace(0.0, 1.5, 301)[:, None]
        old = (np.exp(-d) - 1 < -t) & (d > noise)
        new = np.exp(-d) - 1 < -allowed_drop(np.exp(-noise), t)
        assert (old == new).mean() > 0.999  # equal but where d sits on the noise to the last bit
    assert isinstance(allowed_drop(0.9, 0.1), float) and allowed_drop(np.array([0.5, 0.95]), 0.1).tolist() == \
        pytest.approx([0.5, 0.1])
