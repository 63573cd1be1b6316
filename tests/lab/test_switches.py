"""A slow switch named as the switch, and a slow node as the node, on the shared six-node lab: two
leaf bridges of three, each joined to the head's bridge by its own uplink (tc tbf at 1200 mbit/s: the
sum of its three 400 mbit/s node links, a non-blocking fabric), which `collbench lab up --leaves 2`
writes as Slurm's topology.conf. Each fault is planted once and judged by every consumer that reads
the tree:
- healthy: names nothing (the slow node's report below: exactly that node, no switch; a healthy
  qualification of this lab: tests/lab/test_common_faults.py);
- the path between the leaves at a quarter (leaf 0's uplink at 300 mbit/s): the report's slow_uplink,
  the nine pairs across it its evidence, no node and no pair named (without the tree: slow pairs). A
  round of three pairs across shares the uplink (each near 100 mbit/s, unequally: 0.0094, 0.0113 and
  0.0118 GB/s in one round measured here), a round of one pair across runs near 300: those shares are
  the uplink's evidence, never slow pairs of their own (tests/unit/test_topology.py); `qualify
  --topology` (a first round of pairs inside each leaf, then fresh pairs, retests and gates) exits 1
  with `slow_uplink leaf0,leaf1` and every node passing, none drained for it (a watch cycle's alert
  for the switch, doubting no node: tests/unit/test_watch_cycle.py);
- node 4's own link at a quarter instead: the report names that node and no switch, and qualify names
  it, drains it (a stand-in scontrol records the call) and no other, with its evidence measured
  against the other pairs (no declared rate). Every rate, share and tree: simulated in the unit tier
  (tests/unit/test_qualify_switches.py, tests/unit/test_topology.py)."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from orchestrator.lab import cluster as labmod
from orchestrator.results import dataset
from tests.helpers import run_cli, stand_in

pytestmark = pytest.mark.lab
QUALIFY = ["--ranks-per-node", "1", "-b", "4M", "-e", "8M", "-n", "3", "--format", "json"]
SWEEP = ["--ranks-per-node", "1", "--patterns", "pairwise", "--collectives", "all_reduce", "-b", "4M", "-e", "8M",
         "-n", "3"]


def _flags(lab, tmp_path, exit_code: int, topology: bool = True, out=None) -> list[dict]:
    """The flags of a pairwise run's report (the run made here unless `out` holds one), which exits
    `exit_code` (0: nothing flagged, 1: flags)."""
    if out is None:
        out = tmp_path / "results"
        proc = run_cli(["run", "--address", lab.address, *SWEEP, "--output", str(out)], env=lab.env(), timeout=600)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    tree = ["--topology", labmod.load(lab.name).topology_path] if topology else []
    report = run_cli(["report", str(out), *tree, "--format", "json"], timeout=120)
    assert report.returncode == exit_code, report.stdout[-2000:] + report.stderr[-2000:]
    return json.loads(report.stdout)["flags"]


def _qualify(lab, tmp_path, exit_code: int, *extra: str, env: dict | None = None) -> tuple[dict, list[dict], dict]:
    """`collbench qualify --topology`'s verdicts by node IP, its switch verdicts and its whole answer;
    it exits `exit_code`."""
    tree = labmod.load(lab.name).topology_path
    proc = run_cli(["qualify", "--address", lab.address, *QUALIFY, "--topology", tree, "--output",
                    str(tmp_path / "results"), *extra], env=env or lab.env(), timeout=900)
    assert proc.returncode == exit_code, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert f"collbench: switches from {tree}: leaf0 3 node(s), leaf1 3 node(s)" in proc.stderr, proc.stderr[-2000:]
    # the manifest keeps the tree judged by and each node's leaf
    kept = json.loads(dataset.manifest(str(tmp_path / "results"), out["run_id"])["switches"])
    ips = lab.node_ips
    assert kept["source"] == tree and kept["leaves"] == {ip: f"leaf{i // 3}" for i, ip in enumerate(ips)}, kept
    assert kept["switches"] == {"spine": ["leaf0", "leaf1"]}, kept
    out["stderr"] = proc.stderr
    return {v["node"]: v for v in out["nodes"]}, out["switches"], out


def test_the_lab_writes_its_switch_tree(six):
    text = open(labmod.load(six.name).topology_path).read()
    ips = six.node_ips
    assert f"SwitchName=leaf0 Nodes={','.join(ips[:3])}\n" in text and f"SwitchName=leaf1 Nodes={','.join(ips[3:])}\n" \
        in text and "SwitchName=spine Switches=leaf0,leaf1\n" in text
    assert "leaves:  2 (leaf0 1200mbit, leaf1 1200mbit uplinks)" in six.up_output, six.up_output


def test_the_path_between_leaves_at_a_quarter_is_the_switch_for_the_report_and_qualify(six, tmp_path):
    state = labmod.load(six.name)
    labmod.shape_uplink(state, 0, "300mbit")  # the shared lab sets it back for the next test
    flags = _flags(six, tmp_path / "sweep", 1)
    said = [(f["kind"], f.get("switches"), f.get("pairs")) for f in flags]
    assert said == [("slow_uplink", ["leaf0", "leaf1"], 9)], flags
    assert sorted(flags[0]["nodes"]) == sorted(six.node_ips)
    # the same rows without the tree: the pairs across, named one by one
    plain = _flags(six, tmp_path, 1, topology=False, out=tmp_path / "sweep" / "results")
    assert plain and {f["kind"] for f in plain} <= {"slow_pair", "intermittent"}, plain

    verdicts, switches, _ = _qualify(six, tmp_path / "qualify", 1)
    assert {ip: v["verdict"] for ip, v in verdicts.items()} == {ip: "pass" for ip in six.node_ips}
    assert [(s["verdict"], s["switches"], sorted(s["nodes"])) for s in switches] == [
        ("slow_uplink", ["leaf0", "leaf1"], sorted(six.node_ips))], switches
    assert switches[0]["factor"] < 0.5 and switches[0]["inside"] >= 2, switches


def test_a_slow_node_inside_a_leaf_is_the_node_named_and_drained(six, tmp_path):
    labmod.shape_link(labmod.load(six.name), 4, "100mbit")  # the shared lab sets it back for the next test
    slow_ip = six.node_ips[4]
    flags = _flags(six, tmp_path / "sweep", 1)
    assert [(f["kind"], f["nodes"]) for f in flags] == [("slow_node", [slow_ip])], flags

    # qualify as inside a Slurm job with --drain (issue 44): scontrol is a stand-in that records its calls
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = six.env()
    env["PATH"] = stand_in(bin_dir, "scontrol") + os.pathsep + env.get("PATH", os.defpath)
    verdicts, switches, out = _qualify(six, tmp_path / "qualify", 1, "--scheduler", "slurm", "--drain", env=env)
    assert ({ip: v["verdict"] for ip, v in verdicts.items()}, switches) == (
        {ip: "slow" if ip == slow_ip else "pass" for ip in six.node_ips}, [])
    assert verdicts[slow_ip]["detail"].startswith("slow in ")
    # the slow node drained, by its host name (the lab's nodes carry no Slurm name), and no other
    name = verdicts[slow_ip]["name"] or verdicts[slow_ip]["host"]
    calls = [c.splitlines() for c in (bin_dir / "calls").read_text().split("---\n")[:-1]]
    assert calls == [["update", f"NodeName={name}", "State=DRAIN",
                      f"Reason=collbench: slow, {verdicts[slow_ip]['detail']}, run {out['run_id']}"]], calls
    assert verdicts[slow_ip]["drained"] == {"ok": True, "said": ""}
    assert all(v["action"] is None and v["drained"] is None for ip, v in verdicts.items() if ip != slow_ip)
    assert f"collbench: drained {name} (slurm): scontrol update NodeName={name} State=DRAIN" in out["stderr"]
    assert out["speed_judged"] is True and out["unjudged"] is None
    assert "no expected value applies" in out["stderr"] and "the fastest agreeing probes" in out["stderr"]
    # every probe's rows are in the dataset, with the phase that made them, and are the evidence
    df = pd.read_parquet(tmp_path / "qualify" / "results")
    assert {"pairs", "gate"} <= set(df.phase) and set(df.pattern) == {"qualify"}
    assert (df.status == "ok").all() and (df.n_wrong == 0).all()
    assert {e["group_id"] for v in verdicts.values() for e in v["evidence"]} == set(df.group_id)
    # its evidence: measured against the other pairs (no declared rate), well below them
    slow_evidence = [e for e in verdicts[slow_ip]["evidence"] if e["status"] == "slow"]
    assert slow_evidence and all(e["busbw_gbps"] < 0.5 * e["reference_gbps"] for e in slow_evidence), slow_evidence
    # a healthy node found in a slow probe was measured again at full speed with another partner
    for ip, v in verdicts.items():
        if ip == slow_ip:
            continue
        for i, e in enumerate(v["evidence"]):
            if e["status"] == "slow":
                assert any(later["status"] == "pass" and slow_ip not in later["nodes"] and later["reference_gbps"]
                           for later in v["evidence"][i + 1:]), v["evidence"]
