"""`collbench watch` on a real plain cluster (a 4-node lab that declares no rate), one lab for the
three cases the issue names: a node whose link is slowed between cycles is named by an alert
within two cycles; a node whose CPUs another job holds is skipped, and that job is not preempted;
SIGTERM in the middle of a cycle ends the watch (exit 0) and leaves readable rows."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pytest

from orchestrator.lab import cluster as labmod
from orchestrator.results import dataset
from orchestrator.results.store import CUT_SHORT
from tests.faults import LiveRun
from tests.helpers import stand_in
from tests.lab.conftest import PLAIN_LINK as LINK

pytestmark = pytest.mark.lab
SLOW_LINK = "100mbit"  # a quarter of four's
SLOW_NODE = 2
CANARY = ["--ranks-per-node", "1", "-b", "1M", "-e", "4M", "-f", "4", "-n", "3", "-w", "1", "--group-timeout", "60",
          "--every", "1s", "--format", "jsonl"]


def _cycles(run: LiveRun) -> list[dict]:
    return [json.loads(line) for line in run.stdout if line.startswith("{")]


def _wait_cycles(run: LiveRun, n: int, timeout_s: float) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while len(_cycles(run)) < n and time.monotonic() < deadline and run.proc.poll() is None:
        time.sleep(0.5)
    return _cycles(run)


def test_a_link_slowed_between_cycles_is_named_within_two_cycles(four, tmp_path):
    """... and drained once (`--scheduler slurm --drain`, a stand-in scontrol on the driver's PATH
    recording its calls: the lab nodes are no Slurm's; tests/lab/test_slurm.py drains with the real one)."""
    out = tmp_path / "results"
    st = labmod.load(four.name)
    env = four.env()
    env["PATH"] = stand_in(tmp_path, "scontrol") + os.pathsep + env["PATH"]
    run = LiveRun(["watch", "--address", four.address, *CANARY, "--cycles", "3", "--output", str(out),
                   "--scheduler", "slurm", "--drain"], env=env)
    try:
        first = _wait_cycles(run, 1, 300)
        assert first and first[0]["alerts"] == [] and sorted(first[0]["nodes_checked"]) == sorted(four.node_ips), \
            "".join(run.stderr)[-3000:]
        labmod.shape_link(st, SLOW_NODE, SLOW_LINK)  # between cycles 1 and 2
        rc = run.finish(timeout=600)
    finally:
        labmod.shape_link(st, SLOW_NODE, LINK)
        run.kill()
    cycles = _cycles(run)
    assert rc == 0 and len(cycles) == 3, "".join(run.stderr)[-3000:]
    slow_ip = four.node_ips[SLOW_NODE]
    named = [c["cycle"] for c in cycles if any(a["node"] == slow_ip and a["kind"] == "slow" for a in c["alerts"])]
    assert named and named[0] <= 3, cycles  # cycle 2 or 3: within two cycles of the change
    assert all(a["node"] == slow_ip for c in cycles for a in c["alerts"]), [c["alerts"] for c in cycles]  # no other node alerted
    alert = next(a for c in cycles for a in c["alerts"])
    assert alert["value"] < 0.5 * alert["reference"] and slow_ip in alert["message"]
    # the scheduler's command on every alert naming it, run once: the first cycle that named it
    host = alert["message"].split(" (", 1)[1].split(")", 1)[0]  # no Slurm name on the workers: its host name
    drained = [(c["cycle"], a["drained"]) for c in cycles for a in c["alerts"] if a["drained"]]
    assert drained == [(named[0], {"ok": True, "said": ""})], cycles
    assert all(a["action"]["commands"][0].startswith(f"scontrol update NodeName={host} State=DRAIN")
               for c in cycles for a in c["alerts"] if a["kind"] == "slow")
    calls = (tmp_path / "calls").read_text().split("---\n")[:-1]
    assert len(calls) == 1 and calls[0].startswith(f"update\nNodeName={host}\nState=DRAIN\nReason=collbench: slow, "), \
        calls
    assert f"collbench: drained {host} (slurm)" in "".join(run.stderr)
    # every cycle's rows under its date partition, read by the same readers as runs
    df = pd.read_parquet(out)
    assert {p.name.split("=")[0] for p in out.iterdir() if not p.name.startswith("_")} == {"date"}
    assert set(df.run_id) >= {c["run_id"] for c in cycles}
    assert dataset.manifest(str(out), cycles[0]["run_id"])["command"] == "watch"


HOLDER = textwrap.dedent("""
    import sys, ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    ray.init(address=sys.argv[1], logging_level="ERROR")
    node = next(n["NodeID"] for n in ray.nodes() if n["NodeManagerAddress"] == sys.argv[2] and n["Alive"])

    @ray.remote(num_cpus=1)
    class Training:
        def step(self):
            return "alive"

    job = Training.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
    print(ray.get(job.step.remote(), timeout=120), flush=True)
    sys.stdin.readline()  # hold the node's CPU until told
    print(ray.get(job.step.remote(), timeout=60), flush=True)
""")


def test_a_node_another_job_holds_is_skipped_and_not_preempted(four, tmp_path):
    busy_ip = four.node_ips[1]
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, four.address, busy_ip], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=four.env())
    try:
        assert holder.stdout.readline().strip() == "alive", holder.stderr.read()[-2000:]
        run = LiveRun(["watch", "--address", four.address, *CANARY, "--cycles", "1",
                       "--output", str(tmp_path / "results")], env=four.env())
        rc = run.finish(timeout=300)
        (cycle,) = _cycles(run)
        assert rc == 0 and cycle["nodes_busy"] == [busy_ip], "".join(run.stderr)[-3000:]
        assert sorted(cycle["nodes_checked"]) == sorted(ip for ip in four.node_ips if ip != busy_ip)
        rows = pd.read_parquet(tmp_path / "results")
        assert busy_ip not in {ip for ips in rows.node_ips for ip in ips} and (rows.status == "ok").all()
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "alive"  # the job's actor kept its CPU throughout
    finally:
        holder.kill()
        holder.wait(timeout=30)


def test_sigterm_in_a_cycle_ends_the_watch_and_leaves_readable_rows(four, tmp_path):
    out = tmp_path / "results"
    run = LiveRun(["watch", "--address", four.address, *CANARY, "--output", str(out)], env=four.env())
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not list(out.glob("date=*/*/r*-g*.parquet")):
            time.sleep(0.2)  # the first group of the first cycle is on disk: the cycle goes on
        assert list(out.glob("date=*/*/r*-g*.parquet")), "".join(run.stderr)[-3000:]
        run.proc.send_signal(signal.SIGTERM)
        rc = run.finish(timeout=120)
    finally:
        run.kill()
    assert rc == 0, "".join(run.stderr)[-3000:]
    cycles = _cycles(run)
    assert len(cycles) == 1 and "stopped by a signal" in cycles[0]["note"]
    df = pd.read_parquet(out)
    # a group file is on disk as soon as its first sizes are (written as it goes): the signal may cut
    # a group, whose finished sizes are ok rows and the rest rows saying the run was cut there
    cut = df[df.status != "ok"]
    assert (df.status == "ok").any() and df.run_id.nunique() == 1
    assert (cut.status == "skipped").all() and (cut.error == CUT_SHORT).all(), cut[["status", "error"]]
    assert dataset.manifest(str(out), df.run_id.iloc[0])["state"] == "interrupted"


def test_nodes_of_one_cpu_are_measured_with_what_they_hold_or_named_too_small(four, tmp_path):
    """Issue 32: 4 plain nodes of 1 CPU each, `collbench watch` with its defaults read 'every node is
    busy' every cycle, forever, in silence. Without --ranks-per-node the canary fits its CPU ranks to
    the nodes (one each); with --ranks-per-node 2 each node is named too small (said once, with the
    fix), never busy, and three cycles that measured nothing raise a `blind` alert."""
    base = ["watch", "--address", four.address, "-b", "1M", "-e", "1M", "-n", "3", "-w", "1", "--every", "1s",
            "--format", "jsonl"]
    run = LiveRun([*base, "--cycles", "1", "--output", str(tmp_path / "fitted")], env=four.env())
    try:
        rc = run.finish(timeout=420)
    finally:
        run.kill()
    (cycle,) = _cycles(run)
    assert rc == 0 and cycle["ranks_per_node"] == 1, "".join(run.stderr)[-3000:]
    assert cycle["nodes_too_small"] == [] and cycle["nodes_busy"] == [] and cycle["run_id"]
    assert sorted(cycle["nodes_checked"]) == sorted(four.node_ips)
    assert not [a for a in cycle["alerts"] if a["kind"] == "blind"]

    run = LiveRun([*base, "--ranks-per-node", "2", "--cycles", "3", "--output", str(tmp_path / "small")],
                  env=four.env())
    try:
        rc = run.finish(timeout=180)
    finally:
        run.kill()
    cycles, err = _cycles(run), "".join(run.stderr)
    assert rc == 0 and len(cycles) == 3, err[-3000:]
    assert all(c["nodes_too_small"] == sorted(four.node_ips) and c["nodes_busy"] == [] and not c["run_id"]
               for c in cycles), cycles
    assert cycles[0]["alerts"] == [] and [(a["node"], a["kind"]) for a in cycles[2]["alerts"]] == [("*", "blind")]
    assert err.count("is too small for 2 rank(s) (has 1 CPU(s) for them)") == 4 and "--ranks-per-node 1" in err
    assert "watch measured nothing in the last 3 cycles" in err.strip().splitlines()[-1]
