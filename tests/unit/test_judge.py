"""The one judge (orchestrator/judging/judge.py): leave-one-out references, the prior pooled with
the data, the 3x rule, and what cannot be judged."""

from __future__ import annotations

import math

import numpy as np
import pytest

from orchestrator.judging.judge import (
    GROSS_DROP,
    PRIORS,
    Source,
    grouped_leave_one_out_medians,
    leave_one_out_medians,
    limit,
    peer_arrays,
    prior_for,
)

CPU, NET, GPU = PRIORS[("gloo", False)], PRIORS[("gloo", True)], PRIORS[("nccl", False)]


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


def test_a_3x_drop_is_never_noise_from_three_values_on_however_noisy_peers():
    noisy = np.array([1.0, 2.5, 0.3])  # peers that disagree 8x among themselves
    assert limit(CPU, 3, sigma_data=2.0, df_data=1.0).log_drop == pytest.approx(math.log(GROSS_DROP))
    judged = peer_arrays(np.append(noisy, 0.6 / GROSS_DROP / 1.01), CPU)
    assert judged.low[-1]


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
