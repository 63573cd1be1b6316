"""The healthy level of a fabric from its groups' rates (judging/capacity.py): what the fastest
agreeing groups delivered, never the median where most groups hold a slow member; a rate alone far
above the rest is no level until its group is measured again."""

import numpy as np
import pytest

from orchestrator.judging.capacity import best_by_member, healthy_level, upper_spread
from orchestrator.judging.judge import PRIORS

NETWORK = PRIORS[("gloo", True)]


def test_the_fastest_agreeing_rates_are_the_level_where_most_are_slow():
    rates = [40.0, 40.5, 39.8] + [10.0] * 9  # three healthy pairs, nine holding a node at a quarter
    level = healthy_level(rates, NETWORK)
    assert level.reference == pytest.approx(40.0, rel=0.01) and level.cluster == 3
    assert [level.low(r) for r in rates] == [False] * 3 + [True] * 9
    assert np.median(rates) == 10.0  # the median's judge saw nothing slow


def test_a_rate_alone_far_above_the_rest_is_no_level_until_its_group_agrees_again():
    alone = healthy_level([40.0, 10.0, 10.1, 9.9, 10.0], NETWORK, groups=["ab", "ac", "bd", "cd", "de"])
    assert alone.reference == pytest.approx(10.0, rel=0.01) and alone.high(40.0) and not alone.low(10.0)
    again = healthy_level([40.0, 39.5, 10.0, 10.1, 9.9], NETWORK, groups=["ab", "ab", "ac", "bd", "cd"])
    assert again.reference == pytest.approx(39.75, rel=0.01) and again.low(10.0)
    # two rates of two groups far above the rest are not enough (two outliers of a noisy host)
    two = healthy_level([40.0, 39.5, 10.0, 10.1, 9.9], NETWORK, groups=["ab", "ce", "ac", "bd", "cd"])
    assert two.reference == pytest.approx(10.0, rel=0.02)


@pytest.mark.parametrize(("n", "sigma"), [(20, 0.02), (60, 0.06), (300, 0.06)])
def test_healthy_rates_are_not_low_beyond_the_judges_error_rate(n, sigma):
    rng = np.random.default_rng(7)
    low = []
    for _ in range(200):
        rates = 40.0 * np.exp(rng.normal(0.0, sigma, n))
        level = healthy_level(rates, NETWORK)
        assert level.reference == pytest.approx(40.0, rel=3 * sigma)
        low.append(np.mean([level.low(r) for r in rates]))
    assert np.mean(low) <= 0.01  # FAMILY_ALPHA over n, Bonferroni: well under one rate in a hundred


def test_the_upper_spread_is_barely_widened_by_a_slow_minority():
    rng = np.random.default_rng(3)
    healthy = np.log(40.0) + rng.normal(0.0, 0.1, 400)
    mixed = np.concatenate([healthy, np.log(20.0) + rng.normal(0.0, 0.1, 80)])  # a sixth at half speed
    sigma_alone, _ = upper_spread(healthy, float(np.median(healthy)), 1.0)
    sigma_mixed, _ = upper_spread(mixed, float(np.median(healthy)), 1.0)
    assert sigma_alone == pytest.approx(0.1, rel=0.15) and sigma_mixed == pytest.approx(0.1, rel=0.25)
    assert float(np.std(mixed)) > 2 * 0.1  # what a spread of all of them reads


def test_each_members_best_group_is_its_capacity():
    best = best_by_member([("a", "b"), ("a", "c"), ("b", "c"), ("c", "d")], [40.0, 10.0, 10.0, 9.5])
    assert best == {"a": 40.0, "b": 40.0, "c": 10.0, "d": 9.5}
    assert healthy_level([], NETWORK) is None and healthy_level([0.0, None], NETWORK) is None
