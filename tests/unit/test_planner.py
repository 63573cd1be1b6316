import itertools
import time

import pytest

from orchestrator.errors import UsageError
from orchestrator.execution.pool import gpu_assignment
from orchestrator.sweep.inventory import Node, from_description, from_ray_nodes, order_nodes
from orchestrator.sweep.planner import circle_rounds, doubling, make_plan
from orchestrator.sweep.spec import SweepSpec
from workloads.comm_env import interface_for_ip


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 31, 64, 257, 1000])
def test_pairwise_covers_every_pair_once(n):
    rounds = circle_rounds(n)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    seen = [p for r in rounds for p in r]
    assert len(seen) == len(set(seen)) == n * (n - 1) // 2
    assert set(seen) == set(itertools.combinations(range(n), 2))
    for r in rounds:
        nodes = [x for p in r for x in p]
        assert len(nodes) == len(set(nodes))  # no node twice in a round


def test_doubling():
    assert doubling(1) == [] and doubling(2) == [2] and doubling(6) == [2, 4, 6] and doubling(8) == [2, 4, 8]


def _plan(inventory: str, **kw):
    return make_plan(SweepSpec(**kw), from_description(inventory))


def test_intra_inter_mixed_on_4x4():
    plan = _plan("4x4", patterns=("intra", "inter", "mixed"))
    by_pattern = {}
    for rnd in plan.rounds:
        by_pattern.setdefault(rnd[0].pattern, []).append(sorted(g.ranks for g in rnd))
    # intra: sizes 2 and 4; every node's ranks split into consecutive blocks, all at once
    assert by_pattern["intra"][0][:2] == [(0, 1), (2, 3)] and len(by_pattern["intra"][0]) == 8
    assert by_pattern["intra"][1] == [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11), (12, 13, 14, 15)]
    # inter, k=2: rail-aligned pairs of nodes (0,1) and (2,3), for each of 4 rails
    assert sorted(by_pattern["inter"][0]) == sorted(
        [(0 + r, 4 + r) for r in range(4)] + [(8 + r, 12 + r) for r in range(4)]
    )
    assert by_pattern["inter"][1] == [(0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15)]
    assert by_pattern["mixed"] == [[tuple(range(8)), tuple(range(8, 16))], [tuple(range(16))]]


def test_every_pattern_uses_existing_ranks_and_disjoint_rounds():
    inv = from_description("7x3")
    plan = make_plan(SweepSpec(patterns=("intra", "inter", "mixed", "pairwise", "kbatch:3")), inv)
    for rnd in plan.rounds:
        used = [r for g in rnd for r in g.ranks]
        assert len(used) == len(set(used))
        assert all(0 <= r < inv.world_size for r in used)
    pair_groups = [g for g in plan.groups if g.pattern == "pairwise"]
    assert len(pair_groups) == 21 and all(len(g.ranks) == 6 for g in pair_groups)
    kb = [g for g in plan.groups if g.pattern == "kbatch:3"]
    assert [g.ranks for g in kb] == [tuple(range(9)), tuple(range(9, 18))]  # the last node alone is no group
    ids = [g.group_id for g in plan.groups]
    assert len(ids) == len(set(ids))


def test_group_sizes_and_no_concurrent():
    plan = _plan("4x4", patterns=("intra", "inter"), group_sizes=(4,), concurrent=False)
    assert all(len(r) == 1 for r in plan.rounds)
    assert {len(g.ranks) for g in plan.groups} == {4}
    assert len(plan) == 4 + 4  # intra: one group per node; inter k=4: one group per rail


def test_patterns_needing_more_nodes_are_refused():
    with pytest.raises(UsageError, match="--patterns pairwise: needs at least 2 nodes, the cluster has 1"):
        _plan("1x8", patterns=("pairwise",))
    with pytest.raises(UsageError, match="kbatch:4: needs at least 4 nodes"):
        _plan("3x8", patterns=("kbatch:4",))
    with pytest.raises(UsageError, match="--patterns mixed: no group to run on 4 node"):
        _plan("4x1", patterns=("mixed",))  # mixed needs nodes of several ranks


def test_one_rank_per_node_gets_one_rank_groups():
    (rnd,) = _plan("1x1", patterns=("auto",)).rounds
    assert [g.ranks for g in rnd] == [(0,)]
    plan = _plan("3x1", patterns=("intra", "inter"))
    assert [[g.ranks for g in r] for r in plan.rounds] == [[(0,), (1,), (2,)], [(0, 1)], [(0, 1, 2)]]


def test_plan_1024_nodes_every_pattern_in_seconds():
    t0 = time.perf_counter()
    plan = _plan("1024x8", patterns=("intra", "inter", "mixed", "pairwise", "kbatch:8"))
    assert time.perf_counter() - t0 < 60  # a wide bound: "seconds, not minutes"
    assert sum(1 for g in plan.groups if g.pattern == "pairwise") == 1024 * 1023 // 2


def test_rank_order_by_ip_then_node_id():
    nodes = [Node("b", "10.0.0.10", "h2", 0, 2), Node("a", "10.0.0.9", "h1", 0, 2), Node("c", "10.0.0.10", "h3", 0, 0)]
    assert [n.node_id for n in order_nodes(nodes)] == ["a", "b"]  # numeric IP order; no ranks, no slot


def test_inventory_from_ray_nodes():
    ray_nodes = [
        {"NodeID": "head", "Alive": True, "NodeManagerAddress": "10.0.0.1", "NodeManagerHostname": "head",
         "Resources": {"CPU": 8.0}},
        {"NodeID": "g2", "Alive": True, "NodeManagerAddress": "10.0.0.3", "NodeManagerHostname": "gpu2",
         "Resources": {"CPU": 96.0, "GPU": 8.0, "accelerator_type:H100": 1.0}},
        {"NodeID": "g1", "Alive": True, "NodeManagerAddress": "10.0.0.2", "NodeManagerHostname": "gpu1",
         "Resources": {"CPU": 96.0, "GPU": 8.0, "accelerator_type:H100": 1.0}},
        {"NodeID": "dead", "Alive": False, "NodeManagerAddress": "10.0.0.4", "Resources": {"GPU": 8.0}},
    ]
    inv = from_ray_nodes(ray_nodes, ranks_per_node=2)
    assert [n.node_id for n in inv.nodes] == ["g1", "g2"]  # CPU head gets no ranks when GPUs exist
    assert inv.world_size == 16 and inv.use_gpus and inv.nodes[0].accelerator == "H100"
    cpu = from_ray_nodes(
        [{**ray_nodes[0], "Resources": {"CPU": 0.0}}, {**ray_nodes[1], "Resources": {"CPU": 4.0}}], ranks_per_node=3
    )
    assert [(n.node_id, n.ranks) for n in cpu.nodes] == [("g2", 3)]  # a --num-cpus=0 head holds none


def test_gpu_assignment_shares_the_node_and_picks_own():
    assert gpu_assignment(["3", "1", "10", "2"]) == ("1,2,3,10", [2, 0, 3, 1])


IP_ADDR = """1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
2: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\\       valid_lft forever
7: cblab0n@if8    inet 10.213.0.10/24 scope global cblab0n\\       valid_lft forever preferred_lft forever
"""


def test_interface_for_ip():
    assert interface_for_ip("10.213.0.10", IP_ADDR) == "cblab0n"
    assert interface_for_ip("192.0.2.2", IP_ADDR) == "eth0"
    assert interface_for_ip("10.9.9.9", IP_ADDR) is None


@pytest.mark.parametrize("ranks_per_node", [2, 3, 4, 8])
def test_intra_pairwise_covers_every_pair_inside_each_node_in_n_minus_1_rounds(ranks_per_node):
    inv = from_description(f"3x{ranks_per_node}")
    plan = make_plan(SweepSpec(patterns=("intra-pairwise",)), inv)
    want_rounds = ranks_per_node - 1 if ranks_per_node % 2 == 0 else ranks_per_node
    assert len(plan.rounds) == want_rounds
    first = inv.first_rank()
    for rnd in plan.rounds:
        used = [r for g in rnd for r in g.ranks]
        assert len(used) == len(set(used))  # disjoint: all nodes at once
    for node in range(3):
        pairs = {tuple(r - first[node] for r in g.ranks) for g in plan.groups if g.ranks[0] in
                 range(first[node], first[node] + ranks_per_node)}
        assert pairs == set(itertools.combinations(range(ranks_per_node), 2))
    assert all(len(g.ranks) == 2 and g.pattern == "intra-pairwise" for g in plan.groups)


def test_a_run_calls_each_size_of_a_collective_on_its_own():
    """Issue 45: a case of a collective is one call per size (an interrupt or a crash loses the size
    in flight, not the sizes before it); the overlap workload, measured as one program, stays whole."""
    import dataclasses

    from orchestrator.sweep.planner import build_cases, one_size_each

    spec = SweepSpec(collectives=("all_reduce", "all_gather", "overlap"), min_bytes=1024, max_bytes=16 << 10)
    cases = build_cases(spec, 2)
    split = one_size_each(cases)
    whole = [c for c in cases if c.collective == "overlap"]
    assert whole and [c for c in split if c.collective == "overlap"] == whole
    plain = [c for c in cases if c.collective != "overlap"]
    assert [c for c in split if c.collective != "overlap"] == [
        dataclasses.replace(c, counts=(n,)) for c in plain for n in c.counts]
    assert all(len(c.counts) == 3 for c in plain)  # 1K, 4K, 16K: each becomes three calls
