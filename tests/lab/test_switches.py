"""A slow switch named as the switch, on a real lab (issue 46): six nodes on two leaf bridges of
three, each leaf joined to the head's bridge by its own uplink (tc tbf at 1200 mbit/s: the sum of
its three 400 mbit/s node links, a non-blocking fabric), `collbench lab up --leaves 2`, which writes
the switch tree as Slurm's topology.conf. Measured each time by a pairwise run and read by
`collbench report --topology`:
- healthy, twice: nothing named;
- the path between the leaves at a quarter (leaf 0's uplink at 300 mbit/s): slow_uplink, the nine
  pairs across it its evidence, no node and no pair named (without the tree: slow pairs). A round
  of three pairs across shares the uplink (each near 100 mbit/s, unequally: 0.0094, 0.0113 and
  0.0118 GB/s in one round measured here), a round of one pair across runs near 300: those shares
  are the uplink's evidence, never slow pairs of their own (CI's run of 2026-12-05 named a second
  flag beside the switch, which the unequal shares explain: tests/unit/test_topology.py);
- node 4's own link at a quarter instead: that node, and no switch.
The same three faults judged by `collbench qualify --topology` (a real qualification: a first
round of pairs inside each leaf, then fresh pairs, retests and gates): healthy, twice, exit 0 and
nothing named; the quarter-rate path, exit 1 with `slow_uplink leaf0,leaf1` and every node passing
(none drained for it); node 4's link slow, that node and no switch."""

from __future__ import annotations

import json

import pytest

from orchestrator.lab import cluster as labmod
from orchestrator.results import dataset
from tests.helpers import run_cli
from tests.lab.conftest import Lab, require_lab

pytestmark = pytest.mark.lab
QUALIFY = ["--ranks-per-node", "1", "-b", "4M", "-e", "8M", "-n", "3", "--format", "json"]
SWEEP = ["--ranks-per-node", "1", "--patterns", "pairwise", "--collectives", "all_reduce", "-b", "4M", "-e", "8M",
         "-n", "3"]


@pytest.fixture(scope="module")
def two_leaves(labs):
    require_lab()
    labs.close()  # one lab at a time on this 2-core host
    lab = Lab(nodes=6, ranks_per_node=1, link="400mbit", declared=False, leaves=2)
    try:  # torn down whatever fails, the check below included
        assert "leaves:  2 (leaf0 1200mbit, leaf1 1200mbit uplinks)" in lab.up_output, lab.up_output
        yield lab
    finally:
        lab.down()


def _flags(lab, tmp_path, exit_code: int, topology: bool = True) -> list[dict]:
    """The flags of a pairwise run's report, which exits `exit_code` (0: nothing flagged, 1: flags)."""
    out = tmp_path / "results"
    proc = run_cli(["run", "--address", lab.address, *SWEEP, "--output", str(out)], env=lab.env(), timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    tree = ["--topology", labmod.load(lab.name).topology_path] if topology else []
    report = run_cli(["report", str(out), *tree, "--format", "json"], timeout=120)
    assert report.returncode == exit_code, report.stdout[-2000:] + report.stderr[-2000:]
    return json.loads(report.stdout)["flags"]


def test_the_lab_writes_its_switch_tree(two_leaves):
    text = open(labmod.load(two_leaves.name).topology_path).read()
    ips = two_leaves.node_ips
    assert f"SwitchName=leaf0 Nodes={','.join(ips[:3])}\n" in text and f"SwitchName=leaf1 Nodes={','.join(ips[3:])}\n" \
        in text and "SwitchName=spine Switches=leaf0,leaf1\n" in text


def test_healthy_twice_names_nothing(two_leaves, tmp_path):
    for attempt in range(2):
        assert _flags(two_leaves, tmp_path / str(attempt), 0) == []


def test_the_path_between_leaves_at_a_quarter_is_the_switch(two_leaves, tmp_path):
    state = labmod.load(two_leaves.name)
    labmod.shape_uplink(state, 0, "300mbit")
    try:
        flags = _flags(two_leaves, tmp_path, 1)
        assert [(f["kind"], f.get("switches"), f.get("pairs")) for f in flags] == [("slow_uplink", ["leaf0", "leaf1"], 9)], \
            flags
        assert sorted(flags[0]["nodes"]) == sorted(two_leaves.node_ips)
        # the same rows without the tree: the pairs across, named one by one
        plain = _flags(two_leaves, tmp_path / "plain", 1, topology=False)
        assert plain and {f["kind"] for f in plain} <= {"slow_pair", "intermittent"}, plain
    finally:
        labmod.shape_uplink(state, 0, state.uplink_of(0))


def test_a_slow_node_inside_a_leaf_is_the_node(two_leaves, tmp_path):
    state = labmod.load(two_leaves.name)
    labmod.shape_link(state, 4, "100mbit")
    try:
        flags = _flags(two_leaves, tmp_path, 1)
        assert [(f["kind"], f["nodes"]) for f in flags] == [("slow_node", [two_leaves.node_ips[4]])]
    finally:
        labmod.shape_link(state, 4, "400mbit")


def _qualify(lab, tmp_path, exit_code: int) -> tuple[dict, list[dict]]:
    """`collbench qualify --topology`'s verdicts by node IP and its switch verdicts; it exits `exit_code`."""
    tree = labmod.load(lab.name).topology_path
    proc = run_cli(["qualify", "--address", lab.address, *QUALIFY, "--topology", tree, "--output",
                    str(tmp_path / "results")], env=lab.env(), timeout=900)
    assert proc.returncode == exit_code, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert f"collbench: switches from {tree}: leaf0 3 node(s), leaf1 3 node(s)" in proc.stderr, proc.stderr[-2000:]
    # the manifest keeps the tree judged by and each node's leaf
    kept = json.loads(dataset.manifest(str(tmp_path / "results"), out["run_id"])["switches"])
    ips = lab.node_ips
    assert kept["source"] == tree and kept["leaves"] == {ip: f"leaf{i // 3}" for i, ip in enumerate(ips)}, kept
    assert kept["switches"] == {"spine": ["leaf0", "leaf1"]}, kept
    return {v["node"]: v["verdict"] for v in out["nodes"]}, out["switches"]


def test_qualify_healthy_twice_names_nothing(two_leaves, tmp_path):
    for attempt in range(2):
        verdicts, switches = _qualify(two_leaves, tmp_path / str(attempt), 0)
        assert (verdicts, switches) == ({ip: "pass" for ip in two_leaves.node_ips}, [])


def test_qualify_names_the_quarter_rate_path_and_no_node(two_leaves, tmp_path):
    state = labmod.load(two_leaves.name)
    labmod.shape_uplink(state, 0, "300mbit")
    try:
        verdicts, switches = _qualify(two_leaves, tmp_path, 1)
        assert verdicts == {ip: "pass" for ip in two_leaves.node_ips}
        assert [(s["verdict"], s["switches"], sorted(s["nodes"])) for s in switches] == [
            ("slow_uplink", ["leaf0", "leaf1"], sorted(two_leaves.node_ips))], switches
        assert switches[0]["factor"] < 0.5 and switches[0]["inside"] >= 2, switches
    finally:
        labmod.shape_uplink(state, 0, state.uplink_of(0))


def test_qualify_names_a_slow_node_and_no_switch(two_leaves, tmp_path):
    state = labmod.load(two_leaves.name)
    labmod.shape_link(state, 4, "100mbit")
    try:
        verdicts, switches = _qualify(two_leaves, tmp_path, 1)
        slow = two_leaves.node_ips[4]
        assert (verdicts, switches) == ({ip: "slow" if ip == slow else "pass" for ip in two_leaves.node_ips}, [])
    finally:
        labmod.shape_link(state, 4, "400mbit")


def test_watch_alerts_the_quarter_rate_path_as_the_switch_and_doubts_no_node(two_leaves, tmp_path):
    """A watch cycle with the tree (issue 46's "qualify, the report and watch"): its canary's pairs
    across the slow path are the switch's alert, and no node is a suspect for them (no qualification
    follows, no node alerted, nothing to drain)."""
    state = labmod.load(two_leaves.name)
    labmod.shape_uplink(state, 0, "300mbit")
    try:
        proc = run_cli(["watch", "--address", two_leaves.address, *SWEEP, "-w", "1", "--topology", state.topology_path,
                        "--cycles", "1", "--every", "1s", "--format", "jsonl", "--output", str(tmp_path / "results")],
                       env=two_leaves.env(), timeout=900)
    finally:
        labmod.shape_uplink(state, 0, state.uplink_of(0))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (cycle,) = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [(a["node"], a["kind"], a["action"]) for a in cycle["alerts"]] == [("leaf0,leaf1", "slow_uplink", None)], \
        cycle
    assert cycle["doubted"] == [] and cycle["qualify_run_id"] is None, cycle
    assert sorted(cycle["nodes_checked"]) == sorted(two_leaves.node_ips)
