"""Qualify names a slow switch as the switch (issue 46): the real Qualifier against simulated
clusters under leaf switches (benchmarks/qualify_simulator.py: a slow uplink carries its factor
times its leaf's node links, shared unequally by the round's probes across it, as the lab measured;
log-normal noise of the lab's width, 6%), with the verdicts known by construction. The lab form
(bridges joined by a shaped link, a real qualify) is tests/lab/test_switches.py."""

from __future__ import annotations

import itertools
import random
import subprocess

import numpy as np
import pytest

from benchmarks.qualify_simulator import Model, Noise, simulate
from orchestrator import scheduler
from orchestrator.analysis.uplinks import slow_uplinks
from orchestrator.errors import UsageError
from orchestrator.execution.voice import Voice
from orchestrator.operations.qualify import switch_tree
from orchestrator.sweep import topology
from orchestrator.sweep.qualify import Qualifier
from orchestrator.sweep.qualify_pairing import across_round
from orchestrator.sweep.qualify_switches import SlowUplink, find, sides
from orchestrator.sweep.qualify_types import Outcome, Phase, Probe, Result
from orchestrator.sweep.topology import parse_scontrol, place

LAB_NOISE = Noise(0.06, "lognormal")
SEEDS = range(8)


def _leaves(n: int, per_leaf: int) -> tuple[str, ...]:
    return tuple(f"leaf{i // per_leaf}" for i in range(n))


def _qualify(n: int, per_leaf: int, seed: int, topology: bool = True, **faults) -> Qualifier:
    model = Model(n, 1, noise=LAB_NOISE, seed=seed, leaves=_leaves(n, per_leaf), **faults)
    return simulate(model, leaves=None if topology else ())


def _named(q: Qualifier) -> dict[int, Outcome]:
    return {n: v for n, v in q.verdicts.items() if v is not Outcome.PASS}


def _switches(q: Qualifier) -> list[tuple[str, ...]]:
    return [u.switches for u in q.uplinks]


@pytest.mark.parametrize("seed", SEEDS)
def test_two_leaves_of_three_with_a_quarter_rate_path_name_the_path_and_no_node(seed):
    """The lab's shape: the pairs across share the slow link and each gets an unequal share of it."""
    q = _qualify(6, 3, seed, uplink={"leaf0": 0.25})
    assert (_switches(q), _named(q)) == ([("leaf0", "leaf1")], {})
    assert q.unjudged == set() and q.unjudged_note() is None  # the uplink's probes are judged: its evidence
    u = q.uplinks[0]
    assert u.nodes == tuple(range(6)) and u.factor < 0.5 and u.inside >= 2
    assert q.agreement() is None  # never "all nodes agree" beside a slow switch


def test_without_the_topology_the_same_cluster_names_healthy_nodes():
    """What the switch verdict replaces: the pairs across share the slow link unequally, and a node
    whose pairs got a small share reads slow against the others (here in some of the seeds)."""
    named = [_named(_qualify(6, 3, seed, topology=False, uplink={"leaf0": 0.25})) for seed in SEEDS]
    assert any(named) and all(v is Outcome.INTERMITTENT for m in named for v in m.values())


@pytest.mark.parametrize("seed", SEEDS)
def test_one_slow_leaf_of_three_is_named_alone(seed):
    q = _qualify(12, 4, seed, uplink={"leaf1": 0.4})
    assert (_switches(q), _named(q)) == ([("leaf1",)], {})
    assert q.uplinks[0].nodes == (4, 5, 6, 7)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_slow_node_is_the_node_and_no_switch(seed):
    q = _qualify(6, 3, seed, slow={4: 0.4})
    assert (_switches(q), _named(q)) == ([], {4: Outcome.SLOW})


@pytest.mark.parametrize("seed", SEEDS)
def test_a_slow_uplink_and_a_slow_node_elsewhere_are_both_named(seed):
    q = _qualify(12, 4, seed, uplink={"leaf1": 0.4}, slow={9: 0.4})
    assert (_switches(q), _named(q)) == ([("leaf1",)], {9: Outcome.SLOW})


@pytest.mark.parametrize("seed", SEEDS)
def test_a_healthy_cluster_under_leaves_names_nothing(seed):
    q = _qualify(12, 4, seed)
    assert (_switches(q), _named(q)) == ([], {})
    assert q.agreement().startswith("all 12 nodes agree at ")


def test_the_first_round_pairs_inside_leaves_and_nothing_crosses_a_slow_uplink_after_it_is_found():
    """Pairs at random are mostly across leaves: a first round inside each leaf gives the pairs across
    their comparison, and a second, every node paired across leaves, loads every uplink at once.
    Once an uplink is found, retests take partners of the suspect's own side and gates run one per
    side, so that no node is judged on a path the uplink limits."""
    leaves = _leaves(12, 4)
    model = Model(12, 1, noise=LAB_NOISE, seed=3, leaves=leaves, uplink={"leaf1": 0.4}, slow={9: 0.4})
    q = Qualifier(12, 1, leaves=leaves, seed=3)
    rng, rounds = random.Random(4), []
    while probes := q.next_round():
        found = list(q.uplinks)
        rounds.append((probes, found))
        q.record(model.run_round(probes, rng))
    first, second = rounds[0][0], rounds[1][0]
    assert len(first) == 6 and all(len({leaves[n] for n in p.nodes}) == 1 for p in first)
    # then a round across leaves, whole (no retest takes a node from it): each uplink loaded as a job loads it
    assert len(second) == 6 and all(len({leaves[n] for n in p.nodes}) == 2 for p in second)
    assert sorted(n for p in second for n in p.nodes) == list(range(12))
    # the retests and gates planned once the uplink was found: none crosses what was found then
    late = [(p, found) for probes, found in rounds for p in probes if found and p.phase is not Phase.PAIRS]
    assert late and not [p for p, found in late if any(u.crosses(leaves, p) for u in found)]
    assert any(p.phase is Phase.GATE for p, _ in late)


def test_a_round_across_leaves_pairs_every_node_across_where_no_leaf_holds_more_than_half():
    leaves = ("a",) * 3 + ("b",) * 2 + ("c",) * 2
    groups = [[0, 1, 2], [3, 4], [5, 6]]
    for seed in range(5):
        pairs = across_round(leaves, groups, random.Random(seed))
        assert len(pairs) == 3 and all(leaves[x] != leaves[y] for x, y in pairs)
        assert len({n for p in pairs for n in p}) == 6
    big = ("a",) * 5 + ("b",) * 1  # a leaf of more than half: its surplus pairs inside are left out
    assert sorted(leaves_of := [(big[x], big[y]) for x, y in across_round(big, [[0, 1, 2, 3, 4], [5]],
                                                                          random.Random(0))]) == [("a", "b")], leaves_of
    assert across_round(leaves, [[0, 1, 2]], random.Random(0)) == []


def test_slow_uplink_crosses_and_sides():
    leaves = ("a", "a", "b", "b", "c", "c")
    up = SlowUplink(("a",), (0, 1), 4, 1, 10.0, 0.25)
    assert up.crosses(leaves, Probe(Phase.PAIRS, (0, 2))) and not up.crosses(leaves, Probe(Phase.PAIRS, (2, 4)))
    assert not up.crosses(leaves, Probe(Phase.PAIRS, (0, 1)))
    assert up.crosses(leaves, Probe(Phase.GATE, (0, 1, 2)))
    assert sides(leaves, [up], range(6)) == [[0, 1], [2, 3, 4, 5]]
    assert sides(leaves, [], range(6), every=True) == [[0, 1], [2, 3], [4, 5]]
    assert sides((), [], range(3)) == [[0, 1, 2]] and sides((), [], range(3), every=True) == []
    assert up.detail == ("the uplink of a: 4 pair probe(s) across it in the rounds across leaves, their median 10 "
                         "GB/s (0.25x the others); 1 inside at full speed")


@pytest.mark.parametrize("seed", range(5))
def test_a_healthy_leafs_pairs_to_a_slow_leaf_do_not_name_it(seed):
    """Three leaves of four, leaf A's uplink at 30%; measured: every pair inside leaves, A's pairs to
    B and C, two of B's pairs to C. B's pairs across are then mostly to A (slow), and against the
    rest it read slow too (named beside A before). Found surest first, A's pairs leave B's judgement."""
    rng = np.random.default_rng(seed)
    leaf_of = {i: "ABC"[i // 4] for i in range(12)}
    every = [(x, y) for x in range(12) for y in range(x + 1, 12)]
    kept = [(x, y) for x, y in every if leaf_of[x] == leaf_of[y] or "A" in (leaf_of[x], leaf_of[y])]
    a, b = np.array(kept + [(4, 8), (5, 9)]).T
    slow = np.array([(leaf_of[x] == "A") != (leaf_of[y] == "A") for x, y in zip(a, b)])
    busbw = 40.0 * np.where(slow, 0.3, 1.0) * np.exp(rng.normal(0, 0.06, len(a)))
    found = slow_uplinks(leaf_of, a, b, slow, busbw, set(range(12)), 0.10)
    assert [u.switches for u in found] == [("A",)]
    assert (found[0].across, found[0].inside, found[0].low) == (32, 6, 32)


# `scontrol show topology` as Slurm 22.05 (Debian's slurm-wlm) printed it on the lab Slurm of two
# leaves (tests/lab/test_slurm.py checks the same text on every CI run)
SCONTROL = """SwitchName=leaf0 Level=0 LinkSpeed=1 Nodes=slm0,slm1,slm2
SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=slm3,slm4,slm5
SwitchName=spine Level=1 LinkSpeed=1 Nodes=slm[0-5] Switches=leaf[0-1]
"""


def test_scontrol_show_topology_is_read_with_each_node_under_its_lowest_switch():
    tree = parse_scontrol(SCONTROL)
    assert tree.leaf_of() == {f"slm{i}": f"leaf{i // 3}" for i in range(6)}
    assert tree.switches == {"spine": ("leaf0", "leaf1")} and tree.source == "scontrol show topology"


def test_the_slurm_topology_is_asked_inside_a_job_only_and_kept_only_with_switches():
    def run(said: str, rc: int = 0):
        def fake(argv, **kw):
            assert argv == ["scontrol", "show", "topology"] and kw["timeout"] == scheduler.RUN_TIMEOUT_S
            return subprocess.CompletedProcess(argv, rc, said, "")
        return fake
    job = {"SLURM_JOB_ID": "7"}
    assert scheduler.slurm_topology(job, run(SCONTROL)) == SCONTROL
    assert scheduler.slurm_topology({}, run(SCONTROL)) == ""
    assert scheduler.slurm_topology(job, run("", 1)) == ""
    assert scheduler.slurm_topology(job, run("No topology information available\n")) == ""

    def missing(argv, **kw):
        raise FileNotFoundError("scontrol")
    assert scheduler.slurm_topology(job, missing) == ""


def test_qualify_reads_the_tree_given_none_or_refuses_a_bad_file(tmp_path):
    conf = tmp_path / "topology.conf"
    conf.write_text("SwitchName=leaf0 Nodes=slm[0-2]\nSwitchName=leaf1 Nodes=slm[3-5]\n"
                    "SwitchName=spine Switches=leaf[0-1]\n")
    assert switch_tree(str(conf), {}).leaf_of()["slm4"] == "leaf1"
    assert switch_tree("none", {"SLURM_JOB_ID": "7"}) is None
    assert switch_tree(None, {}) is None  # outside a job: no tree unless given
    conf.write_text("SwitchName=leaf0 Nodes=slm[0-2\n")
    with pytest.raises(UsageError, match=r"not a Slurm host list \(unbalanced brackets\)"):
        switch_tree(str(conf), {})


def test_a_tree_read_from_slurm_that_does_not_parse_is_said_and_qualify_goes_on_without(monkeypatch):
    said = []
    monkeypatch.setattr(scheduler, "slurm_topology", lambda environ: "SwitchName=leaf0 Nodes=slm[0-2\n")
    voice = Voice(said.append, said.append)
    assert switch_tree(None, {"SLURM_JOB_ID": "7"}, voice) is None
    assert said == ["collbench: warning: scontrol show topology:1: 'slm[0-2': not a Slurm host list (unbalanced "
                    "brackets); qualifying without a switch tree (--topology FILE gives one)"]


def test_nodes_are_placed_by_short_host_name_and_slurms_own_tree_may_leave_one_out():
    tree = parse_scontrol(SCONTROL)
    assert place(tree, [("10.0.0.1", "slm4.cluster.local", None)]) == {"10.0.0.1": "leaf1"}
    with pytest.raises(UsageError, match="node gpu9, 10.0.0.9 is under no switch of it"):
        place(tree, [("10.0.0.9", "gpu9", None)])
    assert place(tree, [("10.0.0.9", "gpu9", None), ("10.0.0.1", "h", "slm0")], strict=False) == {"10.0.0.1": "leaf0"}


def test_nodes_alone_under_their_leaves_still_agree_when_healthy():
    """Leaves of one node have no pair inside: the level is the pairs across, and a healthy
    cluster says so, never a bare pass."""
    q = simulate(Model(8, 1, noise=LAB_NOISE, seed=1, leaves=_leaves(8, 1)))
    assert (_switches(q), _named(q)) == ([], {}) and q.agreement().startswith("all 8 nodes agree at ")


SPINES = {**{f"l{i}": f"s{i // 2}" for i in range(6)}, **{f"s{i}": "core" for i in range(3)}}


def _three_levels(slow: dict[str, float], seed: int = 0, parents: dict[str, str] = SPINES, leaves: int = 6):
    """Leaves l0.. of 3 nodes (spines s0-s2 of two leaves each under one core by default); every node
    pair once at 10 GB/s times the slowest switch uplink it crosses (`slow`: switch -> factor), times
    3% log-normal noise."""
    leaf_of = {n: f"l{n // 3}" for n in range(3 * leaves)}
    a, b = (np.array(x) for x in zip(*itertools.combinations(range(3 * leaves), 2)))

    def crossed(x, y):
        px, py = topology.path(leaf_of[x], parents), topology.path(leaf_of[y], parents)
        return min([slow.get(s, 1.0) for s in set(px) ^ set(py)] or [1.0])
    busbw = 10 * np.array([crossed(x, y) for x, y in zip(a, b)]) * np.random.default_rng(seed).lognormal(0, 0.03, len(a))
    return leaf_of, parents, a, b, busbw


@pytest.mark.parametrize("slow, named", [
    ({}, []),
    ({"s0": 0.3}, [("s0",)]),  # the spine's uplink: the spine, none of its two leaves
    ({"l0": 0.3}, [("l0",)]),  # a leaf's under a healthy spine: the leaf, not its spine
    ({"s0": 0.3, "l4": 0.3}, [("s0",), ("l4",)]),  # a spine and a leaf under another spine: both
    ({"l0": 0.3, "l1": 0.3}, [("l0",), ("l1",)]),  # both leaves of a spine: the leaves, as measured
])
def test_a_deeper_tree_names_the_spine_whose_every_leaf_is_slow_across_it_and_else_the_leaf(slow, named):
    for seed in range(5):
        leaf_of, parents, a, b, busbw = _three_levels(slow, seed)
        found = slow_uplinks(leaf_of, a, b, busbw < 7, busbw, set(range(18)), 0.2, parents)
        assert sorted(u.switches for u in found) == sorted(named), (seed, [(u.switches, u.factor) for u in found])
    if named == [("s0",)]:  # qualify's form: the spine's nodes are all below it, its crossings any probe out of them
        leaves = tuple(leaf_of[n] for n in range(18))
        results = [Result(Probe(Phase.PAIRS, (int(x), int(y))), Outcome.SLOW if v < 7 else Outcome.PASS, v,
                          reference=10.0) for x, y, v in zip(a, b, busbw)]
        (up,) = find(results, leaves, 0.2, parents=parents)
        assert up.switches == ("s0",) and up.under == (frozenset(range(6)),)
        assert up.crosses(leaves, Probe(Phase.PAIRS, (0, 6))) and not up.crosses(leaves, Probe(Phase.PAIRS, (0, 4)))
        assert sides(leaves, [up], range(18)) == [list(range(6)), list(range(6, 18))]


@pytest.mark.parametrize("parents, slow, named", [
    # two spines: both leaves of s0 slow is those leaves (their pairs between them are slow too), not s1
    ({"l0": "s0", "l1": "s0", "l2": "s1", "l3": "s1", "s0": "core", "s1": "core"}, {"l0": 0.3, "l1": 0.3},
     [("l0",), ("l1",)]),
    # two spines, one slow: the path between them (the pairs across either are the same pairs)
    ({"l0": "s0", "l1": "s0", "l2": "s1", "l3": "s1", "s0": "core", "s1": "core"}, {"s0": 0.3}, [("s0", "s1")]),
    # leaves at two depths: l2 under the core itself, its uplink slow; the spine is no evidence of it
    ({"l0": "s0", "l1": "s0", "s0": "core", "l2": "core"}, {"l2": 0.3}, [("l2",)]),
    # a leaf the tree hangs under no switch (Slurm allows it), its uplink slow: the leaf
    ({"l0": "s0", "l1": "s0"}, {"l2": 0.3}, [("l2",)]),
])
def test_uneven_and_two_spine_trees_name_what_is_slow(parents, slow, named):
    leaves = len({s for s in parents if s.startswith("l")} | {"l2"})
    for seed in range(5):
        leaf_of, _, a, b, busbw = _three_levels(slow, seed, parents, leaves)
        found = slow_uplinks(leaf_of, a, b, busbw < 7, busbw, set(leaf_of), 0.2, parents)
        assert sorted(u.switches for u in found) == sorted(named), (seed, [(u.switches, u.factor) for u in found])
