"""NVLink domains across nodes (issue 33): the Fabric section of real `nvidia-smi -q` outputs
(tests/fixtures/nvidia_smi, sources in its SOURCE.md), nodes grouped by domain, the domain
patterns, the intra-domain topology only where domain facts exist, and the report's domain row."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from orchestrator.analysis import expected, tables
from orchestrator.errors import UsageError
from orchestrator.execution import rows
from orchestrator.sweep.fabric import GpuFabric, node_domain, parse_fabric
from orchestrator.sweep.inventory import from_description, with_domains
from orchestrator.sweep.planner import Group, circle_rounds, make_plan
from orchestrator.sweep.spec import SweepSpec
from workloads.messages import Topology, WorkerInfo, topology_of

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MNNVL = "dc6e40c4-d722-4357-9ba6-5291dd461278"


def _read(name: str) -> str:
    return (FIXTURES / name).read_text()


# -- the parser on what machines printed ---------------------------------------------------------
def test_an_mnnvl_nodes_fabric_gives_its_domain():
    [gpu] = parse_fabric(_read("nvidia_smi/mnnvl_fabric_unhealthy_clique2.txt"))
    assert gpu == GpuFabric(None, "Completed", "Success", 2, MNNVL, "Unhealthy")
    assert gpu.domain == f"{MNNVL}/2"  # an unhealthy fabric is still the node's domain: a thing to measure


def test_a_fabric_refused_for_resources_is_no_domain():
    [gpu] = parse_fabric(_read("nvidia_smi/mnnvl_fabric_insufficient_resources.txt"))
    assert gpu == GpuFabric(None, "Completed", "Insufficient Resources", 0, "00000000-0000-0000-0000-000000000000")
    assert gpu.domain is None


def test_an_hgx_h100s_all_zero_cluster_uuid_is_no_domain():
    [gpu] = parse_fabric(_read("nvidia_smi/h100_fabric_completed_zero_uuid_560.txt"))
    assert gpu == GpuFabric("00000000:DB:00.0", "Completed", "Success", 0, "00000000-0000-0000-0000-000000000000")
    assert gpu.domain is None and node_domain([gpu]) is None


def test_older_drivers_and_gpus_without_a_fabric_give_none():
    [h100] = parse_fabric(_read("doctor/nvidia_smi_q_h100_healthy.txt"))  # driver 535: no CliqueId line
    assert h100 == GpuFabric("00000000:53:00.0", "Completed", "Success", None, None)
    [a10g] = parse_fabric(_read("doctor/nvidia_smi_q_a10g_link_x8_of_x16.txt"))
    assert (a10g.state, a10g.status, a10g.domain) == (None, None, None)


def test_a_node_is_in_a_domain_only_when_every_gpu_is_in_that_one():
    fabric = parse_fabric(_read("nvidia_smi/mnnvl_fabric_unhealthy_clique2.txt"))[0]
    other = GpuFabric(None, "Completed", "Success", 3, MNNVL)
    outside = GpuFabric(None, None, None, None, None)
    assert node_domain([fabric] * 4) == f"{MNNVL}/2"
    assert node_domain([fabric, other]) is None  # the same cluster, another clique: not one domain
    assert node_domain([fabric, outside]) is None
    assert node_domain([]) is None


def test_a_whole_report_of_several_gpus_is_read_gpu_by_gpu():
    block = _read("nvidia_smi/mnnvl_fabric_unhealthy_clique2.txt").split("\n", 3)[3].replace("--\n", "")
    text = "".join(f"GPU 00000000:0{i}:00.0\n    Product Name : NVIDIA GB200\n{block}    Processes : None\n"
                   for i in range(4))
    gpus = parse_fabric(text)
    assert [g.bus_id for g in gpus] == [f"00000000:0{i}:00.0" for i in range(4)]
    assert node_domain(gpus) == f"{MNNVL}/2"


# -- inventory ------------------------------------------------------------------------------------
def test_nodes_are_grouped_by_domain():
    inv = from_description("4x4")
    assert inv.domains() == {}
    inv = with_domains(inv, {"node-00000": "a/1", "node-00002": "a/1", "node-00001": "b/7"})
    assert inv.domains() == {"a/1": [0, 2], "b/7": [1]}
    assert [n.nvlink_domain for n in inv.nodes] == ["a/1", "b/7", "a/1", None]
    assert inv.to_json()[0]["nvlink_domain"] == "a/1"  # the manifest records it


def test_a_described_inventory_with_domains():
    inv = from_description("36x4/18")
    assert {d: len(n) for d, n in inv.domains().items()} == {"described/0": 18, "described/1": 18}
    assert from_description("5x4/2").domains() == {"described/0": [0, 1], "described/1": [2, 3],
                                                    "described/2": [4]}
    for bad in ("4x2cpu/2", "4x4/0", "4x4/"):
        with pytest.raises(UsageError, match="--inventory"):
            from_description(bad)


# -- patterns -------------------------------------------------------------------------------------
def _groups(pattern: str, inv) -> list[list[tuple]]:
    plan = make_plan(SweepSpec(patterns=(pattern,)), inv)
    assert all(g.pattern == pattern for g in plan.groups)
    return [[(g.ranks, g.pair) for g in r] for r in plan.rounds]


def test_domain_puts_every_node_of_each_domain_together():
    assert _groups("domain", from_description("6x2/3")) == [[((0, 1, 2, 3, 4, 5), None), ((6, 7, 8, 9, 10, 11), None)]]
    # a one-node domain has nothing to measure across nodes; a node outside any domain takes no part
    inv = with_domains(from_description("4x2"), {"node-00000": "x/1", "node-00001": "x/1", "node-00002": "y/1"})
    assert _groups("domain", inv) == [[((0, 1, 2, 3), None)]]


def test_domain_pairwise_measures_every_node_pair_inside_each_domain_at_once():
    inv = from_description("8x4/4")
    rounds = _groups("domain-pairwise", inv)
    assert len(rounds) == len(circle_rounds(4)) == 3
    pairs = [pair for r in rounds for _, pair in r]
    assert sorted(pairs) == sorted([(a, b) for a in range(4) for b in range(a + 1, 4)]
                                   + [(a, b) for a in range(4, 8) for b in range(a + 1, 8)])
    for r in rounds:
        nodes = [n for _, pair in r for n in pair]
        assert len(nodes) == len(set(nodes)) == 8  # both domains at once, each node once
    assert rounds[0][0] == ((0, 1, 2, 3, 12, 13, 14, 15), (0, 3))


def test_cross_domain_takes_one_gpu_per_domain_rail_aligned():
    assert _groups("cross-domain", from_description("4x2/2")) == [
        [((0, 4), None), ((1, 5), None), ((2, 6), None), ((3, 7), None)]]


def test_domain_pairs_measures_every_pair_of_whole_domains():
    rounds = _groups("domain-pairs", from_description("6x1/2"))  # three domains: one pair a round, one bye
    assert [len(r) for r in rounds] == [1, 1, 1]
    assert sorted(g for r in rounds for g in r) == [((0, 1, 2, 3), None), ((0, 1, 4, 5), None), ((2, 3, 4, 5), None)]
    assert [len(r) for r in _groups("domain-pairs", from_description("8x4/2"))] == [2, 2, 2]


@pytest.mark.parametrize("pattern", ["domain", "domain-pairwise", "cross-domain", "domain-pairs"])
def test_without_domain_facts_every_domain_pattern_is_refused_naming_it(pattern):
    with pytest.raises(UsageError, match=rf"^--patterns {pattern}: no node reports an NVLink domain .* 64 node"):
        make_plan(SweepSpec(patterns=(pattern,)), from_description("64x8"))


def test_one_domain_or_one_node_domains_are_refused_with_the_reason():
    with pytest.raises(UsageError, match=r"^--patterns cross-domain: needs two NVLink domains, .* in 1$"):
        make_plan(SweepSpec(patterns=("cross-domain",)), from_description("4x4/4"))
    with pytest.raises(UsageError, match=r"^--patterns domain-pairwise: each of the 4 NVLink domain\(s\) has one node"):
        make_plan(SweepSpec(patterns=("domain-pairwise",)), from_description("4x4/1"))


def test_the_usual_patterns_plan_the_same_with_or_without_domains():
    spec = SweepSpec(patterns=("intra", "inter", "mixed", "pairwise", "kbatch:2"))
    assert make_plan(spec, from_description("8x4")) == make_plan(spec, from_description("8x4/4"))


def test_an_unknown_pattern_still_names_the_domain_ones():
    with pytest.raises(UsageError, match="domain,domain-pairwise,cross-domain,domain-pairs"):
        SweepSpec(patterns=("domains",))


# -- topology -------------------------------------------------------------------------------------
def test_topology_is_unchanged_without_domain_facts():
    assert topology_of(["a", "a"]) is Topology.INTRA
    assert topology_of(["a", "b", "c"]) is Topology.INTER
    assert topology_of(["a", "a", "b"]) is Topology.MIXED
    assert topology_of(["a", "b"], [None, None]) is Topology.INTER  # no node with a domain
    assert topology_of(["a", "a", "b"], ["d", "d", None]) is Topology.MIXED  # a node outside it


def test_nodes_of_one_domain_are_intra_domain():
    assert topology_of(["a", "b"], ["d/1", "d/1"]) is Topology.INTRA_DOMAIN
    assert topology_of(["a", "a", "b", "b"], ["d/1"] * 4).value == "intra-domain"
    assert topology_of(["a", "b"], ["d/1", "d/2"]) is Topology.INTER  # across domains: the network
    assert topology_of(["a", "a"], ["d/1", "d/1"]) is Topology.INTRA  # one node stays intra


def _worker(node: str) -> WorkerInfo:
    return WorkerInfo(node, f"10.0.0.{node[-1]}", f"host{node[-1]}", 1, ("0",), "cpu", "2.5", None)


def test_a_rows_topology_uses_the_domains_the_runner_passes():
    run, group = rows.RunRef("r1", "2026-12-02T00:00:00Z"), Group("r0-g0", "domain", 0, (0, 1))
    workers = [_worker("n1"), _worker("n2")]
    base = rows.group_base(run, "nccl", group, 1, workers, [0, 0], None)
    assert base["topology"] == "inter"
    base = rows.group_base(run, "nccl", group, 1, workers, [0, 0], None, domains={"n1": "d/1", "n2": "d/1"})
    assert base["topology"] == "intra-domain"


# -- report ---------------------------------------------------------------------------------------
def _judged(topology: str, busbw: float, expected_gbps: float, world: int) -> dict:
    return {"platform": "gb200", "collective": "all_reduce", "topology": topology, "world_size": world,
            "msg_bytes": 4 << 30, "size": "4G", "busbw": busbw, "expected": expected_gbps,
            "pct_of_expected": 100 * busbw / expected_gbps, "meaning": "typical", "origin": "shipped", "source": "",
            "reasons": []}


def test_intra_vs_inter_gets_a_domain_row_only_where_intra_domain_rows_exist():
    intra, net = _judged("intra", 700.0, 700.0, 4), _judged("inter", 45.0, 48.0, 2)
    before = expected.intra_vs_inter([intra, net])
    assert [r["net_topology"] for r in before] == ["inter"]
    after = expected.intra_vs_inter([intra, net, _judged("intra-domain", 820.0, 835.0, 72)])
    assert after[0] == before[0]
    assert after[1]["net_topology"] == "intra-domain" and after[1]["net_busbw"] == 820.0
    assert after[1]["measured_ratio"] == pytest.approx(700.0 / 820.0)
    assert after[1]["expected_ratio"] == pytest.approx(700.0 / 835.0)
    only = expected.intra_vs_inter([intra, _judged("intra-domain", 820.0, 835.0, 72)])
    assert [r["net_topology"] for r in only] == ["intra-domain"]


def test_the_shipped_nvl72_entry_applies_to_a_full_rack_from_4_gib():
    entries = expected.shipped()
    hit = expected.find(entries, {"gb200", "gpus-4"}, "all_reduce", "intra-domain", 4 << 30, 72, "")
    assert hit is not None and hit.busbw_gbps == 835 and "coreweave/nccl-tests#43" in hit.source
    assert expected.find(entries, {"gb200"}, "all_reduce", "intra-domain", 4 << 30, 8, "") is None
    assert expected.parse([{"topology": "intra-domain", "busbw_gbps": 900}], "x", "user")[0].topology == "intra-domain"


def _rows(topologies: list[tuple[str, int, float]]) -> pd.DataFrame:
    return pd.DataFrame([{"status": "ok", "collective": "all_reduce", "topology": t, "world_size": w,
                          "msg_bytes": 1 << 30, "busbw_gbps": b} for t, w, b in topologies])


def test_the_busbw_table_has_an_intra_domain_column_only_where_rows_have_it():
    plain = _rows([("intra", 4, 700.0), ("inter", 2, 45.0)])
    [row] = tables.by_size(plain, "all_reduce", "busbw_gbps")
    assert list(row) == ["collective", "msg_bytes", "size", "intra", "inter", "mixed"]
    rack = _rows([("intra", 4, 700.0), ("inter", 2, 45.0), ("intra-domain", 72, 820.0), ("intra-domain", 8, 800.0)])
    [row] = tables.by_size(rack, "all_reduce", "busbw_gbps")
    assert list(row)[-1] == "intra-domain" and row["intra-domain"] == 820.0  # the widest group
    peaks = tables.peaks(rack, "all_reduce", [row])
    assert [(p["topology"], p["world_size"], p["peak_busbw"]) for p in peaks] == [
        ("intra", 4, 700.0), ("inter", 2, 45.0), ("intra-domain", 72, 820.0)]
