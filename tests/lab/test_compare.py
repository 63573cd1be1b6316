"""`collbench compare` on a real plain cluster (a lab that declares no rate): two runs of the same
sweep compare clean, and after one node's link is shaped to a quarter of its rate a third run
flags that node's pairs and no other. One lab serves the three runs."""

from __future__ import annotations

import json

import pytest

from orchestrator.lab import cluster as labmod
from tests.helpers import run_cli

pytestmark = pytest.mark.lab
SLOW_LINK = "100mbit"  # a quarter of plain4's (conftest.PLAIN_LINK)
SLOW_NODE = 1  # neither the first nor the last
SWEEP = ["--ranks-per-node", "1", "--patterns", "pairwise", "--collectives", "all_reduce", "-b", "1M", "-e", "4M",
         "-f", "4", "-n", "5", "-w", "1", "-c", "1"]


def _shape(lab, node: int, rate: str) -> None:
    labmod.shape_link(labmod.load(lab.name), node, rate)


def _run(lab, out) -> None:
    proc = run_cli(["run", "--address", lab.address, *SWEEP, "--output", str(out)], env=lab.env(), timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]


def _compare(out, code: int) -> dict:
    """compare's tables, once it exited with `code` (0: nothing flagged, 1: a drop flagged)."""
    proc = run_cli(["compare", str(out), str(out), "--format", "json"], timeout=120)
    tables = json.loads(proc.stdout)["tables"] if proc.stdout else {}
    changes = [(r["link"], r["msg_bytes"], round(r["busbw_change"], 3), r["noise_source"], r["flag"])
               for r in tables.get("matched", [])]
    assert proc.returncode == code, (proc.stderr[-3000:], changes)
    return tables


def test_compare_is_clean_between_healthy_runs_and_names_only_a_slowed_nodes_links(plain4, tmp_path):
    out = tmp_path / "results"
    _run(plain4, out)
    _run(plain4, out)
    tables = _compare(out, code=0)
    assert len(tables["matched"]) == 12  # 6 pairs x 2 sizes, each matched with itself
    assert tables["summary"][0]["noise_peers"] + tables["summary"][0]["noise_iterations"] == 12

    _shape(plain4, SLOW_NODE, SLOW_LINK)
    _run(plain4, out)
    tables = _compare(out, code=1)
    summary = tables["summary"][0]
    assert len(summary["baseline_runs"]) == 2  # both healthy runs of the sweep
    slow_ip = plain4.node_ips[SLOW_NODE]
    flagged = {r["link"] for r in tables["matched"] if r["flag"] == "DROP"}
    slow_links = {r["link"] for r in tables["matched"] if slow_ip in r["link"]}
    assert len(slow_links) == 3 and flagged == slow_links, [
        (r["link"], r["msg_bytes"], round(r["busbw_change"], 3), r["noise_source"], r["flag"])
        for r in tables["matched"]]
    largest = [r for r in tables["matched"] if r["link"] in slow_links and r["msg_bytes"] == 4 << 20]
    assert all(r["busbw_change"] < -0.5 for r in largest)  # a quarter of the rate: well below half
