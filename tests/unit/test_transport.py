"""NCCL's log read on real lines (tests/fixtures/nccl), and the transport columns they give."""

import os
import socket
from pathlib import Path

import pytest

from orchestrator.execution.transport import columns, network_matches, wrong_network
from workloads import nccl_log
from workloads.messages import NcclLog, Transport

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl"


def _log(name: str) -> NcclLog:
    return nccl_log.parse((FIXTURES / name).read_text().splitlines())


def test_versions_networks_and_devices_of_every_kind():
    ib = _log("ib_a100_2.22.log")
    assert (ib.version, ib.network, ib.link_layers) == ("2.22.3", "IB", ("IB",))
    assert ib.channels == ((0, 1, "P2P/direct pointer/read"),)
    roce = _log("roce_h100_2.26.log")
    assert (roce.version, roce.network, roce.link_layers) == ("2.26.2", "IB", ("RoCE",))
    assert roce.warnings == ("Failed to open libnvidia-ml.so.1",)
    old_efa = _log("efa_p4d_ofi_1.11.log")
    assert (old_efa.network, old_efa.provider) == ("AWS Libfabric", "efa")
    assert (15, 2, "NET/AWS Libfabric/1/GDRDMA/Shared") in old_efa.channels
    efa = _log("efa_libfabric_2.29.log")
    assert (efa.version, efa.network, efa.provider) == ("2.29.2", "Libfabric", "efa")
    sock = _log("socket_fallback_gcp_2.19.log")
    assert (sock.network, sock.interfaces) == ("Socket", ("ens7",))
    tcpx = _log("tcpx_a3_reconstructed.log")
    assert tcpx.network == "GPUDirectTCPX_v7"


def test_bare_banner_channels_nvls_and_graph():
    h20 = _log("h20_ib_gdr_2.19.log")
    assert h20.version == "2.19.3" and h20.intra_link == "NVL"
    assert (3, 2, "P2P/CUMEM") in h20.channels and (0, 2, "NET/IB/3/GDRDMA") in h20.channels
    assert _log("nvls_h800_2.18.log").version == "2.18.3" and _log("nvls_h800_2.18.log").nvls
    shm = _log("shm_pcie.log")
    assert shm.channels == ((2, 3, "SHM/direct/direct"),) and shm.intra_link == "PHB" and not shm.nvls


def test_one_rank_on_an_h200():
    """Every worker's log of the GPU check's sweep on one H200 (NCCL 2.28.9): the loaded library's
    banner; NCCL initialises its Socket network on eth0 (no IB there) but one rank connects nothing:
    no channel, no NVLS (the rows' transports stay empty: tests/gpu, on the recorded rows)."""
    h200 = _log("h200_one_rank_2.28.log")
    assert (h200.version, h200.network, h200.interfaces) == ("2.28.9", "Socket", ("eth0",))
    assert h200.channels == () and not h200.nvls and h200.intra_link == "LOC"  # the graph: the GPU to itself


def test_a_spliced_line_does_not_hide_the_next():
    # a shared NCCL_DEBUG_FILE without %p can splice two processes' lines; what follows still counts
    assert _log("interleaved.log").channels == ((1, 0, "P2P/IPC"),)


def test_a_network_that_did_not_load_is_a_warning():
    log = _log("net_not_found_2.21.log")
    assert log.network is None and log.warnings == ("Error: network AWS Libfabric not found.",)


def test_columns_of_a_two_node_group():
    # ranks 0,1 on node a and 2,3 on node b: 0->1 is intra-node, 0->2 crosses the network
    nodes = ["a", "a", "b", "b"]
    log = NcclLog(version="2.21.5", network="IB", link_layers=("IB",), intra_link="NVL",
                  channels=((0, 1, "P2P/CUMEM"), (0, 2, "NET/IB/0/GDRDMA"), (2, 3, "P2P/CUMEM")))
    t = [Transport("nccl", nccl=log)] * 4
    assert columns("nccl", nodes, t) == {"nccl_version": "2.21.5", "net_transport": "IB/GDRDMA",
                                         "intra_transport": "P2P/NVL"}
    nvls = NcclLog(version="2.21.5", network="IB", nvls=True, channels=((0, 1, "P2P/CUMEM"),))
    assert columns("nccl", ["a", "a"], [Transport("nccl", nccl=nvls)] * 2) == {
        "nccl_version": "2.21.5", "intra_transport": "NVLS+P2P"}  # one node: no network
    through_nic = NcclLog(version="2.26.2", network="Socket", interfaces=("eth0",), channels=((0, 1, "NET/Socket/0"),))
    assert columns("nccl", ["a", "a"], [Transport("nccl", nccl=through_nic)])["intra_transport"] == "NET"
    assert columns("nccl", ["a", "b"], [Transport("nccl", nccl=through_nic)])["net_transport"] == "Socket/eth0"
    assert columns("gloo", ["a", "b"], [Transport("gloo", interface="eth1")] * 2) == {"net_transport": "gloo/tcp/eth1"}
    assert columns("nccl", ["a", "b"], [None, None]) == {}


@pytest.mark.parametrize("expected, network, ok", [
    ("IB", "IB", True), ("ib", "IBext_v8", True), ("EFA", "AWS Libfabric", True), ("efa", "Libfabric", True),
    ("EFA", "Socket", False), ("Socket", "Socket", True), ("TCPX", "GPUDirectTCPX_v7", True),
    ("TCPXO", "FasTrak", True), ("IB", None, False), ("gloo", "gloo", True),
])
def test_expect_net_names(expected, network, ok):
    assert network_matches(expected, network) is ok


def test_wrong_network_names_the_ranks():
    ib, sock = NcclLog(network="IB"), NcclLog(network="Socket")
    t = [Transport("nccl", nccl=ib), Transport("nccl", nccl=sock), Transport("nccl", nccl=None)]
    assert wrong_network("IB", "nccl", t) == [(1, "Socket"), (2, "nothing NCCL logged")]
    assert wrong_network("IB", "gloo", [Transport("gloo", interface="eth0")]) == [(0, "gloo")]


def test_debug_file_settings_keep_what_the_user_chose():
    env = {}
    path = nccl_log.configure(env)
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT,NET,GRAPH,ENV,REG"
    assert path.endswith(".log") and "%" not in path
    env = {"NCCL_DEBUG": "TRACE", "NCCL_DEBUG_SUBSYS": "COLL", "NCCL_DEBUG_FILE": "/logs/n.%h.%p.%%.txt"}
    path = nccl_log.configure(env)
    assert env["NCCL_DEBUG"] == "TRACE" and env["NCCL_DEBUG_SUBSYS"] == "COLL,INIT,NET,GRAPH,ENV,REG"
    assert nccl_log.debug_file_path("/logs/n.%h.%p.%%.txt", "gpu7.cluster.local", 42) == "/logs/n.gpu7.42.%.txt"
    assert path.startswith("/logs/n.")
    # a user's file that every worker of the node would share (and truncate) is made one per process
    for given, made in (("/logs/nccl.log", "/logs/nccl.%p.log"), ("/logs/n.%h", "/logs/n.%p.%h"),
                        ("/logs/n.%%p.txt", "/logs/n.%%p.%p.txt")):
        env = {"NCCL_DEBUG_FILE": given}
        path = nccl_log.configure(env)
        assert env["NCCL_DEBUG_FILE"] == made, given
        assert path == nccl_log.debug_file_path(made, socket.gethostname(), os.getpid()), given
        assert f".{os.getpid()}" in path
    # NCCL reads every name after "^" as left out: ours are taken off that list, never appended to it
    for given, kept in (("^COLL,P2P", "^COLL,P2P"), ("^COLL,init,NET", "^COLL"), ("^INIT", "^"), ("ALL", "ALL")):
        env = {"NCCL_DEBUG_SUBSYS": given}
        nccl_log.configure(env)
        assert env["NCCL_DEBUG_SUBSYS"] == kept, given


def test_the_debug_files_of_gone_workers_are_removed_and_no_other(tmp_path):
    """A watch starts new workers every cycle: each new GPU worker removes the files collbench's own
    pattern gave this host's processes that are gone (issue 56), never a live one's, another host's,
    or a user's own file."""
    names = ["collbench-nccl.gpu7.111.log", "collbench-nccl.gpu7.222.log", "collbench-nccl.gpu8.333.log",
             "mine.gpu7.444.log", "collbench-nccl.gpu7.x.log"]
    for name in names:
        (tmp_path / name).write_text("NCCL INFO ...\n")
    removed = nccl_log.remove_stale(str(tmp_path), "gpu7.cluster.local", alive=lambda pid: pid == 111)
    assert removed == [str(tmp_path / "collbench-nccl.gpu7.222.log")]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(set(names) - {"collbench-nccl.gpu7.222.log"})
    assert nccl_log.remove_stale(str(tmp_path / "absent"), "gpu7") == []


def test_reading_appended_lines(tmp_path):
    f = tmp_path / "nccl.log"
    assert nccl_log.read_since(str(f), 0) == ([], 0)
    f.write_text("one\ntwo\n")
    lines, offset = nccl_log.read_since(str(f), 0)
    assert lines == ["one", "two"] and offset == 8
    with f.open("a") as out:
        out.write("three\n")
    assert nccl_log.read_since(str(f), offset) == (["three"], 14)
