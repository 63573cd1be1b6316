"""doctor's checks on facts (pure): the node that differs is named, not the cluster; reachability
names the node no peer can reach; NCCL_SOCKET_IFNAME's matching rules; limits by what the node has.
The parsers of real machines' outputs are tested in test_doctor_facts.py."""

from __future__ import annotations

import pytest

from orchestrator.doctor import checks as ck
from orchestrator.doctor import reach
from orchestrator.doctor.facts import Gpu, NodeFacts, Port, Rdma

IPS = [f"10.0.0.{i}" for i in range(1, 6)]


def _node(ip: str, **changes) -> NodeFacts:
    base = dict(ip=ip, hostname=f"h{ip[-1]}", python="3.11.7", collbench="0.1.0", ray="2.60.0", torch="2.13.0",
                nccl=None, driver=None, env={"NCCL_DEBUG": "WARN"}, interface="eth0", mtu=1500,
                interfaces=("eth0", "lo"), shm_bytes=64 << 30, memlock_bytes=None, dev_infiniband=False)
    return NodeFacts(**{**base, **changes})


def test_the_node_that_differs_is_named_with_the_others_value():
    nodes = [_node(ip) for ip in IPS]
    nodes[2] = _node(IPS[2], torch="2.12.0", env={"NCCL_DEBUG": "WARN", "NCCL_ALGO": "Tree"})
    nodes[4] = _node(IPS[4], mtu=1280)
    cluster, per_node = ck.same_everywhere(nodes)
    torch = next(c for c in cluster if c.name == "same torch")
    assert torch.status == "fail" and torch.detail == "torch 2.13.0 on 4 node(s); 2.12.0 on 10.0.0.3"
    assert [c.detail for c in per_node[IPS[2]]] == ["torch 2.12.0 where the others have 2.13.0",
                                                    "NCCL_ALGO=Tree where the others have (unset)"]
    assert not per_node[IPS[0]] and not per_node[IPS[4]]
    assert next(c for c in cluster if c.name == "same variables").detail == "differ between nodes: NCCL_ALGO"
    mtu, mtu_nodes = ck.same_mtu(nodes)
    assert mtu[0].status == "fail" and mtu[0].detail == "MTU 1500 on 4 node(s); 1280 on 10.0.0.5"
    assert mtu_nodes[IPS[4]][0].detail == "MTU 1280 on eth0 where the others have 1500"
    assert "ip link set dev eth0 mtu 1500" in mtu_nodes[IPS[4]][0].hint
    assert ck.same_mtu([_node(ip) for ip in IPS])[0][0].status == "ok"
    # a fact no node gave is said as read nowhere, `skip`, not `ok`
    unread, _ = ck.same_mtu([_node(ip, mtu=None) for ip in IPS])
    assert (unread[0].status, unread[0].detail) == ("skip", "MTU not read on any node")
    nccl = next(c for c in ck.same_everywhere([_node(ip) for ip in IPS])[0] if c.name == "same nccl")
    assert (nccl.status, nccl.detail) == ("skip", "nccl: not read on any node")


@pytest.mark.parametrize("n", [2, 5, 16, 17, 100])
def test_the_plan_tries_every_pair_at_small_n_and_each_node_from_several_peers_at_large_n(n):
    pairs = reach.plan(n)
    assert len(set(pairs)) == len(pairs) and all(a != b for a, b in pairs)
    if n <= reach.ALL_PAIRS_UP_TO:
        assert len(pairs) == n * (n - 1)
    else:
        inbound = [sum(1 for _, b in pairs if b == i) for i in range(n)]
        assert min(inbound) >= 2 and len(pairs) <= n * (2 + reach.RANDOM_PEERS)


def test_a_node_no_peer_can_reach_is_named_not_every_pair_it_is_in():
    blocked = 3
    attempts = {(a, b): ("no answer in 3s (dropped)" if b == blocked else None) for a, b in reach.plan(5)}
    cluster, per_node = reach.verdicts(IPS, attempts)
    assert cluster.status == "fail" and "blocked node(s): 10.0.0.4" in cluster.detail
    (check,) = per_node[IPS[blocked]]
    assert check.status == "fail" and check.detail.startswith("no peer could connect to it (4 tried: no answer in 3s")
    assert "it connects to 4 of 4" in check.detail and "ephemeral ports" in check.hint
    assert all(not per_node[ip] for i, ip in enumerate(IPS) if i != blocked)
    # one blocked pair among healthy nodes: named as a pair, on both
    attempts = {(a, b): ("refused" if {a, b} == {0, 1} else None) for a, b in reach.plan(5)}
    cluster, per_node = reach.verdicts(IPS, attempts)
    assert cluster.status == "warn" and "1 pair(s) blocked" in cluster.detail
    assert [c.detail for c in per_node[IPS[0]]] == ["no connection with 10.0.0.2: refused"]
    assert reach.verdicts(IPS, dict.fromkeys(reach.plan(5)))[0].status == "ok"


def test_reachability_on_loopback_connects_and_is_refused():
    import socket

    class Holder:
        pass

    h = Holder()
    port = reach.listen(h, "127.0.0.1")
    spare = socket.socket()
    spare.bind(("127.0.0.1", 0))
    nobody = spare.getsockname()[1]
    spare.close()  # a port where nothing listens
    assert reach.connect_all(h, "127.0.0.1", [("127.0.0.1", port), ("127.0.0.1", nobody)], 1.0) == [None, "refused"]
    reach.close(h)
    assert reach.connect_all(h, "127.0.0.1", [("127.0.0.1", port)], 1.0) == ["refused"]  # closed with its holder


@pytest.mark.parametrize("value, interfaces, ok", [
    ("eth", ("eth0", "lo"), True), ("ens", ("eth0", "lo"), False), ("=eth0", ("eth0", "eth01"), True),
    ("=eth", ("eth0",), False), ("^docker,lo", ("docker0", "eth0", "lo"), True), ("^eth", ("eth0", "lo"), False),
    ("ib,eth", ("eth1", "lo"), True),
])
def test_socket_ifname_follows_ncclss_rules(value, interfaces, ok):
    assert ck.socket_ifname_matches(value, interfaces) is ok


def test_an_interface_variable_naming_no_interface_fails():
    (check, *_) = ck.node_checks(_node(IPS[0], env={"NCCL_SOCKET_IFNAME": "ens5"}))
    assert check.status == "fail" and check.detail == "NCCL_SOCKET_IFNAME=ens5 names no interface of the node (eth0, lo)"


def test_limits_are_judged_by_what_the_node_has():
    eight = tuple(Gpu(i, "NVIDIA H100 80GB HBM3", f"00000000:{i:02x}:00.0") for i in range(8))
    nic = (Rdma("mlx5_0", "IB", (Port(1, "ACTIVE", 400.0, "InfiniBand"),)),)
    small = _node(IPS[0], gpus=eight, shm_bytes=64 << 20, memlock_bytes=64 << 10, rdma=nic, dev_infiniband=False)
    found = {c.name: c for c in ck.node_checks(small, ray_gpus=8)}
    assert found["/dev/shm"].status == "fail" and "--shm-size" in found["/dev/shm"].hint
    assert found["memlock"].status == "fail" and found["memlock"].detail == "ulimit -l is 64 KiB with 1 RDMA device(s)"
    assert found["/dev/infiniband"].status == "fail"
    assert found["GPUs in Ray"].status == "ok"
    assert found["GPUDirect RDMA"].status == "warn"
    cpu = {c.name: c for c in ck.node_checks(_node(IPS[0], shm_bytes=64 << 20))}  # gloo on CPUs: shm is no matter
    assert cpu["/dev/shm"].status == "ok" and "memlock" not in cpu
    assert {c.name: c for c in ck.node_checks(small, ray_gpus=7)}["GPUs in Ray"].status == "fail"


def test_a_refusal_names_every_failing_node_and_check_and_one_exclude():
    """Issue 32: node 2 at MTU 1280 and node 3 unreachable were refused naming node 2 alone."""
    from orchestrator.execution.doctor import Diagnosis, refusal

    fail, ok = ck.FAIL, "ok"
    d = Diagnosis(nodes=[
        {"node": "10.0.0.1", "host": "a", "checks": [ck.Check("same MTU", ok, "1500")]},
        {"node": "10.0.0.2", "host": "b", "checks": [ck.Check("same MTU", fail, "1280 where the others have 1500",
                                                              "set one MTU"), ck.Check("/dev/shm", fail, "64 MiB")]},
        {"node": "10.0.0.3", "host": "c", "checks": [ck.Check("reachable", fail, "no peer could connect to it")]},
        {"node": "10.0.0.4", "host": "d", "checks": [ck.Check("same variables", fail, "not a quick check")]},
    ])
    assert refusal(d) == (
        "2 node(s) failed the quick checks: node 10.0.0.2 (b): same MTU: 1280 where the others have 1500 (set one "
        "MTU); /dev/shm: 64 MiB | node 10.0.0.3 (c): reachable: no peer could connect to it; leave them out with "
        "--exclude 10.0.0.2,10.0.0.3, or skip these checks with --no-doctor")
    assert refusal(Diagnosis(nodes=d.nodes[:1])) is None


def test_the_same_environment_is_read_for_every_prefix_a_run_records():
    from orchestrator.doctor.facts import COMM_PREFIXES
    from workloads.comm_env import COMM_ENV_PREFIXES

    assert COMM_PREFIXES == COMM_ENV_PREFIXES and {"GLOO_", "CUDA_", "TORCH_"} <= set(COMM_PREFIXES)
    nodes = [_node(IPS[0], env={"TORCH_NCCL_BLOCKING_WAIT": "1"}), _node(IPS[1])]
    same, _ = ck.same_everywhere(nodes)
    variables = next(c for c in same if c.name == "same variables")
    assert variables.status == "warn" and "TORCH_NCCL_BLOCKING_WAIT" in variables.detail


def test_a_lone_gpus_inactive_nvlinks_are_no_peers_not_a_fault():
    """A one-GPU VM of an SXM part: every link inactive, none up, no other GPU to reach (the H200
    machine itself printed no link at all: tests/unit/test_doctor_facts.py)."""
    lone = Gpu(0, "NVIDIA H200", "00000000:00:1e.0", nvlinks_active=0, nvlinks_inactive=18)
    one = {c.name: c for c in ck.node_checks(_node(IPS[0], gpus=(lone,)), ray_gpus=1)}
    assert (one["GPU 0 NVLink"].status, one["GPU 0 NVLink"].detail) == (
        "ok", "no NVLink peers (18 link(s), all inactive: the node's only GPU)")
    # several GPUs, none with a link up: no NVLink between them at all (fabric manager, a VM): a warning
    pair = (lone, Gpu(1, "NVIDIA H200", "00000000:00:1f.0", nvlinks_active=0, nvlinks_inactive=18))
    two = {c.name: c for c in ck.node_checks(_node(IPS[0], gpus=pair), ray_gpus=2)}
    assert two["GPU 0 NVLink"].status == "warn" and two["GPU 0 NVLink"].detail.startswith(
        "no NVLink between this node's 2 GPUs (all 18 link(s) of every GPU inactive)")
    # one GPU's links down beside a GPU whose links are up: a fault of that GPU
    up = Gpu(1, "NVIDIA H200", "00000000:00:1f.0", nvlinks_active=18, nvlinks_inactive=0)
    mixed = {c.name: c for c in ck.node_checks(_node(IPS[0], gpus=(lone, up)), ray_gpus=2)}
    assert mixed["GPU 0 NVLink"].status == "fail" and mixed["GPU 0 NVLink"].detail == "18 NVLink link(s) inactive, 0 up"
    assert "GPU 1 NVLink" not in mixed
    half = Gpu(0, "NVIDIA H200", "00000000:00:1e.0", nvlinks_active=9, nvlinks_inactive=9)
    assert {c.name: c for c in ck.node_checks(_node(IPS[0], gpus=(half,)))}["GPU 0 NVLink"].status == "fail"


def test_interface_names_that_differ_per_node_are_no_warning_but_each_is_checked_on_its_node():
    """Issue 44: doctor warned `GLOO_SOCKET_IFNAME=slm2n where the others have slm1n` on a cluster whose
    NICs are named per node (the values collbench pins itself); the interface check reads each node's
    value against its own NICs instead, and still fails one that names none."""
    nodes = [_node(ip, interfaces=(f"n{i}", "lo"), interface=f"n{i}",
                   env={"GLOO_SOCKET_IFNAME": f"n{i}", "NCCL_SOCKET_IFNAME": f"n{i}", "NCCL_DEBUG": "WARN"})
             for i, ip in enumerate(IPS)]
    same, per_node = ck.same_everywhere(nodes)
    assert next(c for c in same if c.name == "same variables").status == "ok"
    assert all(not checks for checks in per_node.values())
    assert all(ck.node_checks(n)[0].status == "ok" for n in nodes)
    wrong = _node(IPS[0], interfaces=("n0", "lo"), interface="n0", env={"GLOO_SOCKET_IFNAME": "n1"})
    (check, *_) = ck.node_checks(wrong)
    assert check.status == "fail" and check.detail == "GLOO_SOCKET_IFNAME=n1 names no interface of the node (n0, lo)"


def test_a_run_says_each_nodes_warning_in_one_line_and_goes_on():
    """A variable set on one node alone: `run` and `qualify` say the quick doctor's warning, one
    line per node and check (execution.jobs.say_warnings), and go on; a failed quick check is not
    said there (it refuses the run instead), a failed other one is, and a cluster's finding that no
    node's check says (an NCCL setting on every node, issue 57)."""
    from orchestrator.execution.doctor import Diagnosis
    from orchestrator.execution.jobs import say_warnings
    from orchestrator.execution.voice import Voice

    nodes = [_node(ip) for ip in IPS[:3]]
    nodes[1] = _node(IPS[1], env={"NCCL_DEBUG": "WARN", "NCCL_ALGO": "Tree"})
    _, per_node = ck.same_everywhere(nodes)
    failed = ck.Check("interface", ck.FAIL, "NCCL_SOCKET_IFNAME=ens5 names no interface of the node (eth0, lo)", "")
    diagnosis = Diagnosis(nodes=[{"node": n.ip, "host": n.hostname, "checks": [*per_node[n.ip]]} for n in nodes])
    diagnosis.nodes[2]["checks"].append(failed)
    said = []
    say_warnings(diagnosis, Voice(said.append, said.append))
    (warning,) = [c for c in per_node[IPS[1]]]
    assert said == [f"collbench: doctor: node {IPS[1]} (h{IPS[1][-1]}): {warning.name}: NCCL_ALGO=Tree where the "
                    f"others have (unset); {warning.hint}"]
    say_warnings(None, Voice(said.append, said.append))  # no doctor ran: nothing said
    assert len(said) == 1
    from orchestrator.doctor import settings

    cluster, _ = settings.settings_checks([_node(ip) for ip in IPS[:3]], {"NCCL_CHUNK_SIZE": "2097152"})
    gid = ck.Check("mlx5_0 GID", ck.FAIL, "RoCE port 1 has no GID", "give it an IP address")
    diagnosis.cluster, said = cluster, []
    diagnosis.nodes[0]["checks"].append(gid)
    say_warnings(diagnosis, Voice(said.append, said.append))
    assert said[0] == f"collbench: doctor: node {IPS[0]} (h1): mlx5_0 GID: RoCE port 1 has no GID; give it an IP address"
    assert said[2].startswith("collbench: doctor: NCCL_CHUNK_SIZE: NCCL_CHUNK_SIZE=2097152 on every node: ") \
        and len(said) == 3
