"""`collbench doctor` on the shared 4-node lab with real planted faults: node 1's interface at MTU 1280
among 1500s, and a firewall on node 2 that drops inbound connections to its ephemeral ports (where
gloo's and NCCL's sockets listen). doctor names each node with its check in seconds; `run` refuses in
one line before its first group (where each group with node 2 would hang until its deadline), nothing
written; `--exclude` of the two measures the rest. Both faults are lifted after. A variable set on
one node alone (doctor's "same variables" check, a warning that `run` says and does not refuse):
tests/unit/test_doctor_checks.py, from each node's facts; NCCL settings known to hurt, passed with
--env, are named here, and on one node alone in tests/unit/test_doctor_platform.py."""

from __future__ import annotations

import json
import re
import shutil
import time

import pandas as pd
import pytest

from orchestrator.lab import cluster as labmod
from tests.helpers import run_cli

pytestmark = pytest.mark.lab
MTU_NODE, FIREWALL_NODE = 1, 2


@pytest.fixture()
def faulty(four):
    from tests.lab.conftest import require_lab

    require_lab()
    if not shutil.which("iptables"):  # .ci/run installs it
        pytest.skip("the planted firewall needs iptables (apt-get install iptables)")
    st = labmod.load(four.name)
    labmod.set_mtu(st, MTU_NODE, 1280)
    labmod.block_inbound(st, FIREWALL_NODE)
    try:
        yield st
    finally:
        labmod.set_mtu(st, MTU_NODE, 1500)
        labmod.unblock(st, FIREWALL_NODE)


def _env(st) -> dict:
    import os

    return {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, **st.auth_env()}


def test_doctor_names_each_planted_fault_in_seconds(faulty):
    st = faulty
    t0 = time.monotonic()
    # with the NCCL settings of issue 57 passed as a run would pass them: named for the cluster (every node)
    settings = ["--env", "NCCL_CHUNK_SIZE=2097152", "--env", "NCCL_IGNORE_NET_MISMATCH=1",
                "--env", "NCCL_IB_SPLIT_DATA_ON_QPS=1"]
    proc = run_cli(["doctor", "--address", st.address, "--format", "json", *settings], env=_env(st), timeout=120)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    found = json.loads(proc.stdout)
    by_node = {n["node"]: {c["name"]: c for c in n["checks"]} for n in found["nodes"]}
    ips = [st.node_ip(i) for i in range(4)]
    assert set(by_node) == set(ips)
    mtu = by_node[ips[MTU_NODE]]["same MTU"]
    assert mtu["status"] == "fail" and mtu["detail"].startswith("MTU 1280 on ") and "where the others have 1500" in \
        mtu["detail"]
    blocked = by_node[ips[FIREWALL_NODE]]["reachable"]
    assert blocked["status"] == "fail" and blocked["detail"].startswith("no peer could connect to it (3 tried")
    # only the planted faults: no other node fails a check, and the cluster's lines say the same
    for i, ip in enumerate(ips):
        failing = {name for name, c in by_node[ip].items() if c["status"] == "fail"}
        assert failing == ({"same MTU"} if i == MTU_NODE else {"reachable"} if i == FIREWALL_NODE else set()), \
            (ip, failing)
    cluster = {c["name"]: c for c in found["cluster"]}
    assert cluster["reachable"]["status"] == "fail" and f"blocked node(s): {ips[FIREWALL_NODE]}" in \
        cluster["reachable"]["detail"]
    # the settings: the chunk size fails (wrong results), the mismatch switch warns, split mode is no
    # finding on nodes without RoCE NICs (the lab's veth links); each with NCCL's issue as its source
    assert cluster["NCCL_CHUNK_SIZE"]["status"] == "fail" and \
        cluster["NCCL_CHUNK_SIZE"]["detail"].startswith("NCCL_CHUNK_SIZE=2097152 on every node: ")
    assert "nccl/issues/2408" in cluster["NCCL_CHUNK_SIZE"]["hint"]
    assert cluster["NCCL_IGNORE_NET_MISMATCH"]["status"] == "warn" and "NCCL_IB_SPLIT_DATA_ON_QPS" not in cluster
    # and the odd node out finds nothing on a lab of like nodes (no GPU: its GPU and NIC facts do not apply)
    assert cluster["same kernel"]["status"] == "ok" and cluster["same GPU count"]["status"] == "skip"
    assert cluster["same GPU count"]["detail"] == "GPUs: no node with GPUs"
    assert elapsed < 60, elapsed  # the doctor itself bounds every wait


def test_run_refuses_before_its_first_group_and_runs_without_the_faulty_nodes(faulty, tmp_path):
    st = faulty
    out = tmp_path / "results"
    sweep = ["--address", st.address, "--ranks-per-node", "1", "--patterns", "pairwise", "--collectives",
             "all_reduce", "-b", "64K", "-e", "64K", "-n", "3", "--output", str(out)]
    t0 = time.monotonic()
    proc = run_cli(["run", *sweep], env=_env(st), timeout=300)
    elapsed = time.monotonic() - t0
    line = proc.stderr.strip().splitlines()[-1]
    # every failing node and check in the one line, and the one --exclude that leaves them all out
    assert proc.returncode == 2 and line.startswith("collbench: error: 2 node(s) failed the quick checks: node "), \
        proc.stderr[-2000:]
    assert f"node {st.node_ip(MTU_NODE)} (" in line and f"node {st.node_ip(FIREWALL_NODE)} (" in line
    assert "same MTU: " in line and "reachable: " in line and "--no-doctor" in line
    excluded = re.search(r"--exclude (\S+), or skip", line).group(1)
    assert set(excluded.split(",")) == {st.node_ip(MTU_NODE), st.node_ip(FIREWALL_NODE)}
    assert not out.exists()  # nothing written
    assert elapsed < 120, elapsed  # no group waited for its deadline
    bad = excluded
    proc = run_cli(["run", *sweep, "--exclude", bad], env=_env(st), timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = pd.read_parquet(out)
    assert len(rows) == 1 and (rows.status == "ok").all()  # the one pair of the two nodes left
    assert set(rows.node_ips.iloc[0]) == {st.node_ip(0), st.node_ip(3)}
