"""End to end on a real multi-node cluster reached by `--address`: namespaces joined by a bridge,
links shaped to a known rate, which is the ground truth the measured bandwidths are checked
against (the shared `pair` lab: 2 nodes of 3 CPU ranks at 1 gbit/s, declared); a node lost mid-run
(the shared `four`, which it leaves without that node's Ray: so last, and then taken down and
checked to leave nothing behind); a lab that cannot come up."""

from __future__ import annotations

import json
import os
import subprocess

import pandas as pd
import pytest

from orchestrator.lab import cluster as labmod
from tests.helpers import run_cli

pytestmark = pytest.mark.lab
LINK_GBPS = 0.125  # 1 gbit/s in GB/s


def test_all_patterns_against_the_shaped_link(pair, tmp_path):
    out = tmp_path / "results"
    proc = run_cli(
        ["run", "--address", pair.address, "--ranks-per-node", "2", "--patterns", "intra,inter,mixed,pairwise",
         "--collectives", "all_reduce,all_gather,send_recv", "-b", "4M", "-e", "16M", "-f", "4",
         "-n", "4", "-w", "1", "-c", "1", "--no-concurrent", "--output", str(out)],
        env=pair.env(), timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    df = pd.read_parquet(out)
    assert (df.status == "ok").all() and (df.n_wrong == 0).all()
    assert set(df.pattern) == {"intra", "inter", "mixed", "pairwise"}
    # every row's topology matches where its ranks really ran (the actors' node IPs)
    for _, row in df.iterrows():
        ips = list(row.node_ips)
        assert set(ips) <= set(pair.node_ips)
        want = "intra" if len(set(ips)) == 1 else "inter" if len(set(ips)) == len(ips) else "mixed"
        assert row.topology == want, (row.group_id, ips)
    pair = df[df.pattern == "pairwise"]
    assert pair.pair_nodes.map(len).eq(2).all() and pair.n_nodes.eq(2).all()

    big = df[(df.collective == "all_reduce") & (df.msg_bytes >= 4 << 20)]
    inter = big[(big.topology == "inter") & (big.world_size == 2)]
    intra = big[(big.topology == "intra") & (big.world_size == 2)]
    assert len(inter) and len(intra)
    for size, bw in inter.groupby("msg_bytes").busbw_gbps.median().items():
        assert 0.70 * LINK_GBPS <= bw <= 1.05 * LINK_GBPS, f"inter busbw {bw:.4f} GB/s at {size} B"
        intra_bw = intra[intra.msg_bytes == size].busbw_gbps.median()
        assert intra_bw >= 3 * bw, f"intra {intra_bw:.4f} vs inter {bw:.4f} GB/s at {size} B"

    # the report on this real lab run shows intra above inter at every size
    # One node pair only (nothing to compare a pair with); --threshold 0.99 flags no noisy rank.
    rep = run_cli(["report", str(out), "--format", "json", "--threshold", "0.99"])
    assert rep.returncode == 0, rep.stdout + rep.stderr
    rep = json.loads(rep.stdout)
    assert rep["run"]["run_id"] == df.run_id.iloc[0] and rep["run"]["state"] == "finished"
    head = [r for r in rep["tables"]["busbw"] if r["collective"] == "all_reduce"]
    assert head and all(r["intra"] > r["inter"] for r in head)
    # the lab declared what it is: every node's platform is cpu+lab, and an inter-node group's
    # busbw is judged against the shaped rate (the same physical truth as above)
    assert set(df.platform) == {"cpu+lab"}
    inter_rows = [r for r in rep["tables"]["expected"] if r["topology"] == "inter"]
    assert inter_rows and all(r["expected"] == LINK_GBPS and r["origin"] == "declared" for r in inter_rows)
    assert all(r["source"].startswith("collbench lab up --link 1gbit") for r in inter_rows), inter_rows
    assert all(70 <= r["pct_of_expected"] <= 105 for r in inter_rows), inter_rows


def test_plan_against_the_live_lab(pair):
    proc = run_cli(["plan", "--address", pair.address, "--ranks-per-node", "2", "--patterns",
                    "intra,inter,mixed,pairwise", "--groups"], env=pair.env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "inventory: 2 node(s), 4 rank(s) (CPU)" in proc.stdout  # the head holds no ranks
    assert "total: 6 groups in 4 rounds" in proc.stdout


def test_refused_or_failed_lab_up_leaves_nothing():
    from tests.lab.conftest import require_lab

    require_lab()
    name = "tfail"
    # Refused before anything exists: a subnet too small, an interface name already taken.
    proc = run_cli(["lab", "up", "--name", name, "--nodes", "3", "--subnet", "10.215.0.0/30"])
    assert proc.returncode == 2 and "--subnet 10.215.0.0/30: too small for 3 nodes" in proc.stderr
    subprocess.run(["ip", "link", "add", f"cb{name}1h", "type", "bridge"], check=True)
    try:
        proc = run_cli(["lab", "up", "--name", name, "--nodes", "2", "--subnet", "10.215.1.0/24"])
        assert proc.returncode == 2 and f"network interface cb{name}1h already exists" in proc.stderr
        assert os.path.exists(f"/sys/class/net/cb{name}1h")  # not ours: left alone
        subprocess.run(["ip", "addr", "add", "10.215.9.1/24", "dev", f"cb{name}1h"], check=True)
        proc = run_cli(["lab", "up", "--name", "tfree", "--nodes", "2", "--subnet", "10.215.9.0/24"])
        assert proc.returncode == 2 and f"--subnet 10.215.9.0/24: already in use on interface cb{name}1h" in proc.stderr
    finally:
        subprocess.run(["ip", "link", "del", f"cb{name}1h"], check=False)
    # Failing half-way (the network is built, Ray started, the nodes cannot join in 0.5 s):
    # everything it made is removed.
    proc = run_cli(["lab", "up", "--name", name, "--nodes", "2", "--subnet", "10.215.1.0/24", "--timeout", "0.5"])
    assert proc.returncode == 1 and "lab up failed and was cleaned up" in proc.stderr
    assert not os.path.exists(f"/run/netns/cb-{name}-0") and not os.path.exists(f"/sys/class/net/cb{name}br")
    assert not os.path.exists(labmod.state_dir(name)) and not os.path.exists(f"/tmp/cbl-{name}")
    assert f"cb{name}" not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout


@pytest.mark.breaks_lab
def test_a_lost_node_fails_or_skips_only_its_groups_and_lab_down_removes_exactly_what_up_made(four, labs,
                                                                                            tmp_path):
    """Node 2's Ray stopped (by its process session) while a run of three of the four nodes goes: the
    groups without it pass, the others fail or are skipped naming it. Then the lab, its last test
    done, is taken down: every namespace, veth, bridge, process and folder `lab up` made is gone."""
    from orchestrator.lab.raynodes import session_pids, stop_sessions
    from tests.faults import LiveRun

    st = labmod.load(four.name)
    three = four.node_ips[:3]
    out = tmp_path / "results"
    run = LiveRun(["run", "--address", four.address, "--nodes", ",".join(three), "--ranks-per-node", "1",
                   "--patterns", "inter,pairwise", "--no-concurrent", "--collectives", "all_reduce", "-b", "1M",
                   "-e", "1M", "-n", "20", "--group-timeout", "30", "--output", str(out)], env=four.env())
    try:
        run.wait_for("# group r0-g0", timeout=120)
        stop_sessions([st.sessions[3]], grace_s=0)  # node 2's Ray processes, by session
        rc = run.finish(timeout=400)
    finally:
        run.kill()
    assert rc == 1
    df = pd.read_parquet(out)
    lost = four.node_ips[2]
    needs = df.node_ips.map(lambda ips: lost in list(ips))
    assert (df[~needs].status == "ok").all() and (~needs).sum() == 2  # inter (0,1) and pair (0,1)
    assert not (df[needs].status == "ok").any()
    skipped = df[df.status == "skipped"]
    assert len(skipped) >= 1 and skipped.error.str.contains(f"{lost}").all()
    assert "skipped" in "".join(run.stderr)

    assert len(st.namespaces) == 4 and all(os.path.exists(f"/run/netns/{ns}") for ns in st.namespaces)
    assert any(labmod.netns_pids(ns) for ns in st.namespaces)
    sessions = list(st.sessions)
    labs.close()  # `collbench lab down`, exit 0
    assert not any(os.path.exists(f"/run/netns/{ns}") for ns in st.namespaces)
    assert not any(os.path.exists(f"/sys/class/net/{d}") for d in [*st.veths, st.bridge])
    assert not any(session_pids(s) for s in sessions)
    assert not os.path.exists(st.state_dir) and not os.path.exists(st.temp_dir)
    ip = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=False).stdout
    assert f"cb{four.name}" not in ip


def test_overlap_hides_communication_behind_compute(pair, tmp_path):
    """Across the shaped link the network is the bottleneck and gloo's threads mostly wait, so a
    matmul of the same duration can hide it: T_overlap lies in [0, min(T_comp, T_comm)] up to noise."""
    out = tmp_path / "results"
    proc = run_cli(["run", "--address", pair.address, "--ranks-per-node", "1", "--patterns", "inter",
                    "--collectives", "overlap", "-b", "4M", "-e", "16M", "-f", "2", "-n", "8", "-w", "2", "-c", "1",
                    "--output", str(out)], env=pair.env(), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ov = pd.read_parquet(out)
    assert len(ov) == 3 and (ov.status == "ok").all() and (ov.n_wrong == 0).all() and set(ov.topology) == {"inter"}
    for _, r in ov.iterrows():
        noise = 0.15 * (r.t_comp_us + r.t_comm_us)
        assert -noise <= r.t_overlap_us <= min(r.t_comp_us, r.t_comm_us) + noise, r.to_dict()
        assert r.t_step_us <= r.t_comp_us + r.t_comm_us + noise
    assert ov.overlap_efficiency.median() > 0.3  # most of the shorter part is hidden


def test_expect_net_fails_groups_on_another_network(pair, tmp_path):
    """--expect-net compares what the backend says it uses for inter-node traffic (here gloo's TCP
    on the lab's veths) with what the operator expects: a wrong network fails the groups that span
    nodes, loudly, before they measure; groups inside a node are not concerned."""
    args = ["run", "--address", pair.address, "--ranks-per-node", "2", "--patterns", "intra,inter",
            "--collectives", "all_reduce", "-b", "1K", "-e", "4K", "-n", "2"]
    proc = run_cli([*args, "--expect-net", "IB", "--output", str(tmp_path / "ib")], env=pair.env(), timeout=300)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    df = pd.read_parquet(tmp_path / "ib")
    inter, intra = df[df.topology == "inter"], df[df.topology == "intra"]
    assert len(inter) and (inter.status == "failed").all() and (intra.status == "ok").all()
    assert inter.error.str.contains(r"inter-node traffic would use gloo \(rank 0 on .*\), not IB \(--expect-net\)").all()
    assert sorted(inter.failed_ranks.iloc[0]) == [0, 1]
    proc = run_cli([*args, "--expect-net", "gloo", "--output", str(tmp_path / "gloo")], env=pair.env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    df = pd.read_parquet(tmp_path / "gloo")
    # each node's traffic leaves through its own veth in its namespace (cb<lab><i>n)
    for _, row in df.iterrows():
        assert row.net_transport.startswith(f"gloo/tcp/cb{pair.name}"), row.net_transport
