"""The build NCCL ran with, read from its log (issue 34): git hash, network/tuner/profiler plugins, CTA
policy, registered buffers; on every row, and the run's values in the manifest. Real lines where a
public log has them (tests/fixtures/nccl, README.md there says from where); lines rebuilt from NCCL's
format strings where none was found, each marked so below."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from orchestrator.execution.events import GroupEnded
from orchestrator.execution.outcome import Tally
from orchestrator.execution.session import Session
from orchestrator.execution.transport import BUILD, columns
from orchestrator.results.schema import MANIFEST_SCHEMA, ROW_SCHEMA, rows_table
from orchestrator.sweep.planner import Group
from orchestrator.sweep.spec import SweepSpec
from tests.helpers import nccl_sequence_groups, replay_into_debug_file
from workloads import nccl_log
from workloads.messages import NcclLog, Status, Transport

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl"
BUILD_COLUMNS = ["nccl_git_hash", "nccl_net_plugin", "nccl_tuner_plugin", "nccl_profiler_plugin", "nccl_cta_policy"]


def _log(name: str) -> NcclLog:
    return nccl_log.parse((FIXTURES / name).read_text().splitlines())


def _two_nodes(log: NcclLog) -> dict:
    return columns("nccl", ["node-a", "node-b"], [Transport("nccl", nccl=log)] * 2)


def test_the_build_of_an_efa_node():
    log = _log("plugins_efa_2.29.log")
    assert (log.version, log.git_hash, log.network, log.provider) == ("2.29.2", "ebd1e92", "Libfabric", "efa")
    assert (log.net_plugin, log.net_plugin_release) == ("Libfabric (v11)", "aws-ofi-nccl 1.18.0")
    assert log.tuner_plugin == "nccl_ofi_tuner (v3)"
    # "PROFILER/Plugin: Could not find", "NET/OFI Support for global registrations: false": neither is a fact
    assert (log.profiler_plugin, log.cta_policy, log.registered) == (None, None, ())
    assert _two_nodes(log) == {
        "nccl_version": "2.29.2", "net_transport": "Libfabric/efa", "intra_transport": None,
        "nccl_git_hash": "ebd1e92", "nccl_net_plugin": "Libfabric (v11) aws-ofi-nccl 1.18.0",
        "nccl_tuner_plugin": "nccl_ofi_tuner (v3)"}


def test_a_plugin_loaded_is_not_a_plugin_used():
    # aws-ofi-nccl loaded, failed to initialise (three WARNs), NCCL fell back to its Socket transport
    log = _log("plugin_init_failed_2.27.log")
    assert (log.version, log.git_hash, log.network) == ("2.27.7", None, "Socket")  # no git line before 2.29
    assert len(log.warnings) == 3 and log.warnings[-1].endswith("NET/OFI Initializing plugin failed")
    cols = _two_nodes(log)
    assert (cols["net_transport"], cols["nccl_net_plugin"]) == ("Socket/ens32", "Libfabric (v10) aws-ofi-nccl 1.17.1")


@pytest.mark.parametrize("name, plugin, release", [
    ("ib_a100_2.22.log", "internal", None),  # "NET/Plugin: Could not find: libnccl-net.so. Using internal ..."
    ("roce_h100_2.26.log", "internal", None),  # "... Using internal net plugin."
    ("net_not_found_2.21.log", "internal", None),
    ("efa_p4d_ofi_1.11.log", None, "aws-ofi-nccl 1.11.0-aws"),  # the public log has no NET/Plugin line
    ("efa_libfabric_2.29.log", None, "aws-ofi-nccl 1.18.0"),
    ("socket_fallback_gcp_2.19.log", None, None),
])
def test_the_network_plugin_of_every_recorded_log(name, plugin, release):
    log = _log(name)
    assert (log.net_plugin, log.net_plugin_release) == (plugin, release)


# Real lines from public logs (host prefixes as they were, or none where the source had none)
@pytest.mark.parametrize("line, field, value", [
    # NCCL 2.2x with aws-ofi-nccl on p4d (public training log): the 2.21-2.23 format
    ("llama-3-8b-node-0-0:188:585 [0] NCCL INFO TUNER/Plugin: Using tuner plugin nccl_ofi_tuner",
     "tuner_plugin", "nccl_ofi_tuner"),
    ("fsdp-worker-1:74:357 [1] NCCL INFO TUNER/Plugin: Using internal tuner plugin.", "tuner_plugin", "internal"),
    ("NCCL INFO NET/Plugin: Loaded net plugin NCCL RDMA Plugin v6 (v6)", "net_plugin", "NCCL RDMA Plugin v6 (v6)"),
    ("nccl-benchmark-csgjr:1:1 [0] NCCL INFO NET/Plugin: Loaded net plugin SPCX (v12)", "net_plugin", "SPCX (v12)"),
    ("[2026-01-15 02:30:45] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.17.2", "net_plugin_release",
     "aws-ofi-nccl 1.17.2"),
    ("ip-172-31-8-153:45343:45343 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so).", "net_plugin",
     "internal"),
])
def test_one_real_line(line, field, value):
    assert getattr(nccl_log.parse([line]), field) == value


# Rebuilt from NCCL's format strings (no public log with these lines was found): the source and tag
@pytest.mark.parametrize("line, field, value", [
    # src/init.cc getEnvCtaPolicyOnce, v2.29.2+
    ("h:1:1 [0] NCCL INFO Parsed environment variable NCCL_CTA_POLICY=EFFICIENCY to 1", "cta_policy", "EFFICIENCY"),
    ("h:1:1 [0] NCCL INFO Parsed environment variable NCCL_CTA_POLICY=ZERO|EFFICIENCY to 3", "cta_policy",
     "EFFICIENCY|ZERO"),
    ("h:1:1 [0] NCCL INFO Parsed environment variable NCCL_CTA_POLICY=0 to 0", "cta_policy", "DEFAULT"),
    # src/misc/param.cc ncclLoadParam, v2.27-2.28 (NCCL_PARAM(CtaPolicy, "CTA_POLICY", ...))
    ("h:1:1 [0] NCCL INFO NCCL_CTA_POLICY set by environment to 2.", "cta_policy", "ZERO"),
    # src/plugin/profiler/profiler_v5.cc v2.30; profiler_v2.cc v2.26
    ("h:1:1 [0] NCCL INFO PROFILER/Plugin: Loaded Example-profiler (v5)", "profiler_plugin", "Example-profiler (v5)"),
    ("h:1:1 [0] NCCL INFO PROFILER/Plugin: loaded Example-profiler", "profiler_plugin", "Example-profiler"),
    # src/plugin/tuner/tuner_v6.cc v2.30
    ("h:1:1 [0] NCCL INFO TUNER/Plugin: Using basic (v6)", "tuner_plugin", "basic (v6)"),
    # src/misc/git_version.cc v2.30: "NCCL git version " NCCL_GIT_BRANCH " " NCCL_GIT_COMMIT_HASH
    ("h:1:1 [0] NCCL INFO NCCL git version master 3ea7eed", "git_hash", "3ea7eed"),
])
def test_one_line_from_the_format(line, field, value):
    assert getattr(nccl_log.parse([line]), field) == value


def test_registered_buffers_count_by_kind_and_failures_do_not():
    # src/transport/{p2p,net,nvls,coll_net}.cc at v2.26.2 and v2.30.7, and v2.19.3's NVLS-only graph line
    lines = [
        "h:1:1 [0] NCCL INFO rank 0 - IPC registering buffer 0x7f0000000000 size 1048576 (baseAddr 0x7f0000000000 "
        "size 2097152) to peer 1",  # an attempt, not a registration
        "h:1:1 [0] NCCL INFO rank 0 failed to NET register userbuff 0x7f0000000000 buffSize 1048576 GDR flag 0",
        "h:1:1 [0] NCCL INFO rank 0 - IPC deregistered buffer 0x7f0000000000 peer 1 ipc remote buffer 0x7f1000000000",
        "h:1:1 [0] NCCL INFO NET/OFI Support for global registrations: false",
    ]
    assert nccl_log.parse(lines).registered == ()
    lines += [
        "h:1:1 [0] NCCL INFO rank 0 - IPC registered buffer 0x7f0000000000 size 1048576 (baseAddr 0x7f0000000000 "
        "size 2097152) to peer 1 regAddr 0x7f1000000000 offsetOut 0",
        "h:1:1 [0] NCCL INFO rank 0 - NET register userbuff 0x7f0000000000 (handle 0x55d0), buffSize 1048576",
        "h:1:1 [0] NCCL INFO rank 0 successfully registered NVLS sendbuff 0x7f0000000000, recvbuff 0x7f0000100000, "
        "sendbuff size 1048576, recvbuff size 1048576, reg sendbuff 0x7f2000000000, reg recvbuff 0x7f2000100000",
    ]
    log = nccl_log.parse(lines)
    assert log.registered == ("IPC", "NET", "NVLS")
    old_nvls = nccl_log.parse(["h:1:1 [0] NCCL INFO rank 2 successfully graph-registered sendbuff 0x1, recvbuff 0x2, "
                               "sendbuff size 8 (register size 2097152, sendGran 2097152), recvbuff size 8 (register "
                               "size 2097152, recvGran 2097152), reg sendbuff 0x3, reg recvbuff 0x4"])
    assert old_nvls.registered == ("NVLS",)
    # the group's kinds over its ranks, joined by "+"; a group that registered nothing has none
    one, other = NcclLog(registered=("IPC",)), NcclLog(registered=("NET", "NVLS"))
    assert columns("nccl", ["a", "a"], [Transport("nccl", nccl=one), Transport("nccl", nccl=other)])[
        "nccl_buffers_registered"] == "IPC+NET+NVLS"
    assert "nccl_buffers_registered" not in columns("nccl", ["a", "a"], [Transport("nccl", nccl=NcclLog())] * 2)


def test_a_found_plugin_replaces_an_earlier_miss():
    # NCCL 2.21 tries several names, printing "No plugin found (name)" for each one missing
    log = nccl_log.parse(["h:1:1 [0] NCCL INFO NET/Plugin: No plugin found (libnccl-net-ofi.so)",
                          "h:1:1 [0] NCCL INFO NET/Plugin: Loaded net plugin AWS Libfabric (v7)"])
    assert log.net_plugin == "AWS Libfabric (v7)"


def _groups(name: str) -> list[list[str]]:
    return nccl_sequence_groups(FIXTURES / "sequences" / name)


def test_later_groups_keep_the_build_nccl_printed_once(tmp_path):
    first, *later = groups = _groups("plugins_efa_2.29.log")
    assert first == (FIXTURES / "plugins_efa_2.29.log").read_text().splitlines() and len(later) == 2
    once = ("NCCL version", "git version", "NET/Plugin", "NET/OFI", "TUNER/Plugin", "Successfully loaded")
    assert not any(k in line for group in later for line in group for k in once)
    alone = _two_nodes(nccl_log.parse(later[0]))
    assert alone == {"nccl_version": None, "net_transport": "Libfabric", "intra_transport": None}
    rows = [_two_nodes(log) for log in replay_into_debug_file(tmp_path / "collbench-nccl.gpu-st-ml-1.50292.log",
                                                                 groups)]
    assert rows == [_two_nodes(nccl_log.parse(first))] * 3
    assert rows[2]["nccl_net_plugin"] == "Libfabric (v11) aws-ofi-nccl 1.18.0" and rows[2]["nccl_git_hash"] == "ebd1e92"


def test_process_wide_names_every_build_fact_but_registration():
    assert set(nccl_log.PROCESS_WIDE) >= {"git_hash", "net_plugin", "net_plugin_release", "tuner_plugin",
                                         "profiler_plugin", "cta_policy"}
    assert "registered" not in nccl_log.PROCESS_WIDE


def test_the_columns_are_appended_and_round_trip():
    at = ROW_SCHEMA.names.index(BUILD_COLUMNS[0])  # the inspector columns (test_inspector) come after them
    assert ROW_SCHEMA.names[at:at + 6] == [*BUILD_COLUMNS, "nccl_buffers_registered"] and list(BUILD) == BUILD_COLUMNS
    assert ROW_SCHEMA.names[at + 6:] == ["inspector_busbw_gbps", "inspector_time_us", "inspector_ops"]
    assert MANIFEST_SCHEMA.names[-5:] == BUILD_COLUMNS
    row = {"run_id": "r", "nccl_net_plugin": "Libfabric (v11) aws-ofi-nccl 1.18.0", "nccl_buffers_registered": "IPC"}
    back = rows_table([row]).to_pylist()[0]
    assert (back["nccl_net_plugin"], back["nccl_buffers_registered"], back["nccl_cta_policy"]) == (
        "Libfabric (v11) aws-ofi-nccl 1.18.0", "IPC", None)


class _Pool:
    def shutdown(self) -> None:
        pass


class _Store:
    def __init__(self) -> None:
        self.manifests: list[dict] = []

    def compact(self) -> None:
        pass

    def write_manifest(self, manifest: dict) -> None:
        self.manifests.append(dict(manifest))


def test_the_manifest_keeps_the_runs_build(tmp_path):
    efa = _two_nodes(_log("plugins_efa_2.29.log"))
    failed = _two_nodes(_log("plugin_init_failed_2.27.log"))
    tally = Tally()
    group = Group("r0-g0", "inter", 0, (0, 1))
    tally.group_ended(GroupEnded(group, Status.OK, ({**efa, "n_wrong": 0}, {**failed, "n_wrong": 0}), None))
    assert tally.nccl_build["nccl_version"] == {"2.29.2", "2.27.7"}
    s = Session(SweepSpec(output=str(tmp_path / "out")), "run-1", dt.datetime.now(dt.timezone.utc))
    s.pool, s.store, s.manifest = _Pool(), _Store(), {"device_models": [], "nccl_version": "2.21.5"}
    s.finish(tally)
    written = s.store.manifests[-1]
    assert {k: written[k] for k in ["nccl_version", *BUILD_COLUMNS]} == {
        "nccl_version": "2.27.7,2.29.2", "nccl_git_hash": "ebd1e92",
        "nccl_net_plugin": "Libfabric (v10) aws-ofi-nccl 1.17.1,Libfabric (v11) aws-ofi-nccl 1.18.0",
        "nccl_tuner_plugin": "nccl_ofi_tuner (v3)", "nccl_profiler_plugin": None, "nccl_cta_policy": None}
    # no row said which NCCL: the version torch was built with stays
    s.manifest = {"device_models": [], "nccl_version": "2.21.5"}
    s.finish(Tally())
    assert s.store.manifests[-1]["nccl_version"] == "2.21.5" and s.store.manifests[-1]["nccl_git_hash"] is None


def test_the_report_says_the_runs_build():
    from orchestrator.analysis.frame import COLUMNS, Frame
    from orchestrator.analysis.report import run_header

    table = rows_table([{"run_id": "run-1", "status": "ok", "collective": "all_reduce", "world_size": 2,
                        "node_ips": ["10.0.0.1", "10.0.0.2"], "hosts": ["a", "b"], "ranks": [0, 1]}])
    manifest = {"nccl_version": "2.29.2", "nccl_git_hash": "ebd1e92", "nccl_tuner_plugin": "nccl_ofi_tuner (v3)"}
    run, _ = run_header(Frame(table.select(COLUMNS)), manifest)
    assert (run["nccl_git_hash"], run["nccl_tuner_plugin"], run["nccl_net_plugin"]) == (
        "ebd1e92", "nccl_ofi_tuner (v3)", None)
