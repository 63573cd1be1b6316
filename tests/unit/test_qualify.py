"""Qualify's localisation, pure: planted slow, hanging and scale-only faults in simulated clusters
of 16 to 4,096 nodes, with the rounds it takes."""

import math

import pytest

from orchestrator.sweep.qualify import Outcome, Phase, Probe, Qualifier, Reference, Result, Verdict
from orchestrator.sweep.qualify_sim import Model, simulate


def _bad(q: Qualifier) -> dict[int, str]:
    return {n: v.value for n, v in q.verdicts.items() if v is not Verdict.PASS}


@pytest.mark.parametrize("n", [16, 64, 256, 1024, 4096])
def test_rounds_grow_at_most_logarithmically(n):
    bound = 2 * math.log2(n) + 4
    healthy = simulate(Model(n))
    assert _bad(healthy) == {} and healthy.rounds == 3  # intra, pairs, gate
    nic = simulate(Model(n, nic_slow={n // 3: 0.5}))
    assert _bad(nic) == {n // 3: "slow"} and nic.rounds == 4  # + one retest round against good partners
    two = simulate(Model(n, nic_slow={n // 3: 0.5, n // 2 + 1: 0.6}, hang={n - 5}))
    assert _bad(two) == {n // 3: "slow", n // 2 + 1: "slow", n - 5: "hang"} and two.rounds <= bound
    scale = simulate(Model(n, scale_slow={n // 5 + 1: 0.5}))  # fine in pairs, slow in bigger groups
    assert _bad(scale) == {n // 5 + 1: "slow"} and scale.rounds <= bound


def _drive(q: Qualifier, outcome) -> list[list[Probe]]:
    """Run the qualifier with `outcome(probe) -> Result`; the rounds it proposed."""
    rounds = []
    while probes := q.next_round():
        rounds.append(probes)
        q.record([outcome(p) for p in probes])
    return rounds


def test_a_hung_pair_names_the_member_that_did_not_answer_and_clears_the_other():
    q = Qualifier(4, 1, seed=3, reference=Reference(pair=10.0))  # a matching, not every pair (as without one)

    def outcome(p: Probe) -> Result:
        if p.phase is Phase.PAIRS and 2 in p.nodes:  # node 2's worker is stopped: its rank does not answer
            return Result(p, Outcome.HANG, None, (2,))
        return Result(p, Outcome.PASS, 10.0)

    rounds = _drive(q, outcome)
    assert _bad(q) == {2: "hang"}
    assert [r[0].phase for r in rounds] == [Phase.PAIRS, Phase.RETEST, Phase.GATE]
    partner = next(n for p in rounds[0] if 2 in p.nodes for n in p.nodes if n != 2)
    assert rounds[1] == [Probe(Phase.RETEST, (partner, rounds[1][0].nodes[1]))] and 2 not in rounds[2][0].nodes


def test_when_every_rank_answered_the_retest_finds_who_hangs_again():
    q = Qualifier(6, 1, seed=1)

    def outcome(p: Probe) -> Result:
        if 4 in p.nodes and p.phase in (Phase.PAIRS, Phase.RETEST):  # a partitioned node: alive, but stuck
            return Result(p, Outcome.HANG, None, ())
        return Result(p, Outcome.PASS, 10.0)

    _drive(q, outcome)
    assert _bad(q) == {4: "hang"}
    assert [e.probe.phase for e in q.evidence[4]] == [Phase.PAIRS, Phase.RETEST]


def test_expected_values_catch_a_bad_majority():
    bad = {i: 0.5 for i in range(40)}  # 40 of 64 nodes at half speed
    assert _bad(simulate(Model(64, nic_slow=bad))) == {}  # the median is the bad majority's: nothing stands out
    known = simulate(Model(64, nic_slow=bad), reference=Reference(intra=40.0, pair=40.0, gate=40.0))
    assert _bad(known) == {i: "slow" for i in bad}


def test_an_odd_node_and_a_pair_of_two():
    assert _bad(simulate(Model(7, nic_slow={3: 0.5}))) == {3: "slow"}
    assert _bad(simulate(Model(2, nic_slow={1: 0.5}))) == {}  # one pair and nothing to compare it with
    # with the expected value the pair is slow, but no partner is known good to tell its two apart
    two = simulate(Model(2, nic_slow={1: 0.5}), reference=Reference(pair=40.0))
    assert _bad(two) == {0: "slow", 1: "slow"}


def test_a_gate_that_names_its_culprit_runs_again_without_it():
    """A worker stopped after the pairs passed: the gate hangs and its ping names the node; the
    others are not suspects, and the gate without it passes."""
    q = Qualifier(4, 1, seed=2, reference=Reference(pair=10.0))

    def outcome(p: Probe) -> Result:
        if p.phase is Phase.GATE and 2 in p.nodes:
            return Result(p, Outcome.HANG, None, (2,))
        return Result(p, Outcome.PASS, 10.0)

    rounds = _drive(q, outcome)
    assert _bad(q) == {2: "hang"}
    assert [r[0].phase for r in rounds] == [Phase.PAIRS, Phase.GATE, Phase.GATE] and rounds[2][0].nodes == (0, 1, 3)


def test_failed_probes_and_what_a_slow_verdict_carries():
    q = Qualifier(6, 1, seed=5, reference=Reference(pair=10.0), min_fraction=0.8)

    def outcome(p: Probe) -> Result:
        if 1 in p.nodes and p.phase in (Phase.PAIRS, Phase.RETEST):
            return Result(p, Outcome.FAILED, None, (1,), "rank 0 died")
        if 4 in p.nodes:
            return Result(p, Outcome.PASS, 5.0)
        return Result(p, Outcome.PASS, 9.0)

    _drive(q, outcome)
    assert _bad(q) == {1: "failed", 4: "slow"}
    slow = [e for e in q.summary()[4]["evidence"] if e["status"] == "slow"]
    assert slow and all(e["busbw_gbps"] == 5.0 and e["reference_gbps"] == 10.0 for e in slow)
    assert "5 GB/s < 0.80 x 10 GB/s" in slow[0]["detail"]


def test_deadlines_follow_what_each_kind_of_probe_took():
    from orchestrator.sweep.qualify import Deadlines

    d = Deadlines(ceiling_s=60.0)
    assert d.limit_s(Phase.PAIRS) == 60.0  # nothing measured yet: --group-timeout
    d.took(Phase.PAIRS, 1.0)
    d.took(Phase.PAIRS, 3.0)
    assert d.limit_s(Phase.RETEST) == 15.0 and d.limit_s(Phase.PAIRS) == 15.0  # 5 x the longest pair
    assert d.limit_s(Phase.GATE) == 60.0
    d.took(Phase.GATE, 0.5)
    assert d.limit_s(Phase.BISECT) == 10.0  # the floor
    d.took(Phase.GATE, 30.0)
    assert d.limit_s(Phase.GATE) == 60.0  # the ceiling


def test_one_node_of_several_ranks_is_probed_alone():
    q = simulate(Model(1, ranks_per_node=4))
    assert _bad(q) == {} and q.rounds == 1
    slow = simulate(Model(1, ranks_per_node=4, slow={0: 0.5}), reference=Reference(intra=40.0))
    assert _bad(slow) == {0: "slow"}


def test_a_partner_that_hangs_in_a_retest_is_named_and_the_suspect_tested_again():
    q = Qualifier(6, 1, seed=4, reference=Reference(pair=10.0))
    stopped: set[int] = set()

    def outcome(p: Probe) -> Result:
        if p.phase is Phase.RETEST and not stopped:  # the first retest's partner stops
            stopped.add(p.nodes[1])
        if stopped & set(p.nodes):
            return Result(p, Outcome.HANG, None, tuple(stopped & set(p.nodes)))
        return Result(p, Outcome.PASS, 5.0 if 3 in p.nodes else 10.0)

    _drive(q, outcome)
    assert _bad(q) == {3: "slow", next(iter(stopped)): "hang"}
