"""doctor's platform checks (issue 57), on what real machines printed (tests/fixtures/doctor and
tests/fixtures/nvidia_smi, with their sources) and on /sys trees written as the kernel shows them:
the NCCL settings known to hurt, named with effect, fix and source, on every node or on the one
that has them; PCIe ACS on the GPUs' and NICs' paths; the IOMMU's mode; RoCE ports without a GID;
NVLink fabric registration and IMEX channels; the odd node out of a fleet; JUnit XML read back."""

from __future__ import annotations

import os
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from orchestrator.commands.render import render_junit
from orchestrator.doctor import fleet, platform, platform_checks, settings
from orchestrator.doctor.facts import Gpu, NodeFacts, Port, Rdma, parse_smi_q, rdma_devices
from orchestrator.sweep.fabric import parse_fabric

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
IPS = [f"10.0.0.{i}" for i in range(1, 5)]
H100 = parse_smi_q((FIXTURES / "doctor" / "nvidia_smi_q_h100_healthy.txt").read_text())[1][0]


def _text(name: str) -> str:
    return (FIXTURES / name).read_text()


def _nic(name: str, kind: str = "RoCE", rate: float = 400.0, firmware: str = "28.39.1002") -> Rdma:
    layer = "Ethernet" if kind == "RoCE" else "InfiniBand"
    return Rdma(name, kind, (Port(1, "ACTIVE", rate, layer, ("0000:0000:0000:0000:0000:ffff:0a00:0001",)
                                  if kind == "RoCE" else None),), firmware=firmware)


def _node(ip: str, gpus: int = 8, nics: int = 8, **changes) -> NodeFacts:
    base = dict(ip=ip, torch_cuda="13.0", env={}, gpus=tuple(Gpu(i, H100.name, f"0000:{0x18 + i:02x}:00.0")
                                                             for i in range(gpus)),
                rdma=tuple(_nic(f"mlx5_{i}") for i in range(nics)), platform=platform.Platform(kernel="6.8.0-60"))
    return NodeFacts(**{**base, **changes})


ISSUE = {"NCCL_CHUNK_SIZE": "2097152", "NCCL_IGNORE_NET_MISMATCH": "1", "NCCL_IB_SPLIT_DATA_ON_QPS": "1"}


def test_the_issues_settings_are_named_with_effect_fix_and_source_for_the_cluster_or_the_node():
    nodes = [_node(ip) for ip in IPS]
    cluster, per_node = settings.settings_checks(nodes, ISSUE)  # --env: every node
    by_name = {c.name: c for c in cluster}
    assert sorted(by_name) == sorted(ISSUE) and not any(per_node.values())
    chunk = by_name["NCCL_CHUNK_SIZE"]
    assert chunk.status == "fail" and chunk.detail.startswith("NCCL_CHUNK_SIZE=2097152 on every node: send/recv")
    assert "https://github.com/NVIDIA/nccl/issues/2408" in chunk.hint
    assert by_name["NCCL_IGNORE_NET_MISMATCH"].status == "warn" and "issues/2428" in by_name[
        "NCCL_IGNORE_NET_MISMATCH"].hint
    assert by_name["NCCL_IB_SPLIT_DATA_ON_QPS"].status == "warn" and "issues/2409" in by_name[
        "NCCL_IB_SPLIT_DATA_ON_QPS"].hint
    # the same set on one node's own environment: that node is named, with its value; the others not
    nodes[2] = _node(IPS[2], env=dict(ISSUE))
    cluster, per_node = settings.settings_checks(nodes)
    assert sorted(c.name for c in per_node[IPS[2]]) == sorted(ISSUE)
    assert not per_node[IPS[0]] and not per_node[IPS[1]] and not per_node[IPS[3]]
    summary = next(c for c in cluster if c.name == "NCCL_CHUNK_SIZE")
    assert summary.status == "fail" and summary.detail == "NCCL_CHUNK_SIZE on 1 of 4 node(s): 10.0.0.3 (2097152)"
    # nothing set: one ok line that says how many settings were looked for
    ok, _ = settings.settings_checks([_node(ip) for ip in IPS])
    assert [(c.status, c.detail) for c in ok] == [("ok", f"none of the {len(settings.SETTINGS)} settings known to "
                                                          "hurt is set")]


@pytest.mark.parametrize("env, nics, named", [
    ({"NCCL_IB_SPLIT_DATA_ON_QPS": "1"}, "IB", []),  # split mode is a RoCE harm only
    ({"NCCL_IB_SPLIT_DATA_ON_QPS": "0"}, "RoCE", []),
    ({"NCCL_CHUNK_SIZE": "524288"}, "RoCE", []),  # under 1 MiB: correct in the report
    ({"NCCL_CHUNK_SIZE": "1M"}, "RoCE", ["NCCL_CHUNK_SIZE"]),
    ({"NCCL_P2P_NET_CHUNKSIZE": "1048576"}, "IB", ["NCCL_P2P_NET_CHUNKSIZE"]),
    ({"NCCL_NET_GDR_LEVEL": "LOC", "NCCL_IB_DISABLE": "1"}, "IB", ["NCCL_NET_GDR_LEVEL", "NCCL_IB_DISABLE"]),
    ({"NCCL_NET_GDR_LEVEL": "LOC", "NCCL_IB_DISABLE": "1"}, None, []),  # no RDMA NIC: nothing they turn off
    ({"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL128", "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}, None,
     ["NCCL_ALGO", "NCCL_PROTO", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"]),
])
def test_each_setting_hurts_where_its_row_says(env, nics, named):
    node = _node(IPS[0], rdma=(_nic("mlx5_0", nics),) if nics else ())
    assert [s.variable for s, _ in settings.findings(node, env)] == named


def test_every_setting_cites_its_source_and_says_effect_and_fix():
    for s in settings.SETTINGS:
        assert s.source.startswith("https://") and s.effect and s.fix and s.when, s.variable


def _pci_tree(root: Path, paths: list[str]) -> None:
    """/sys/devices/pci0000:XX/... for each device path, and /sys/bus/pci/devices/BDF linked to it."""
    for path in paths:
        parts = path.split("/")
        (root / "sys/devices" / path).mkdir(parents=True, exist_ok=True)
        bus = root / "sys/bus/pci/devices"
        bus.mkdir(parents=True, exist_ok=True)
        for i in range(1, len(parts)):
            link = bus / parts[i]
            if not link.exists():
                os.symlink(root / "sys/devices" / "/".join(parts[:i + 1]), link)


def test_acs_is_judged_on_the_gpus_and_nics_paths_from_real_lspci_output(tmp_path):
    on = _text("doctor/lspci_acsctl_redirect_on.txt")
    off = _text("doctor/lspci_acsctl_all_off.txt")
    assert platform.parse_acs(on) == (("82:00.0", "82:01.0", "82:02.0", "82:03.0"), 4)
    assert platform.parse_acs(off) == ((), 6)  # 15:01.0 and 17:00.0-17:1f.0; 16:00.0 has no ACS capability
    # the gpud host: a GPU behind 15:01.0 -> 16:00.0 -> 17:00.0 (all off); the redirecting ports are
    # in front of the NVSwitches, off the GPU's path
    gpu = "pci0000:14/0000:14:00.0/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0"
    _pci_tree(tmp_path, [gpu])
    both = on + "\n" + off
    p = platform.read(str(tmp_path), lambda cmd: both, ["0000:18:00.0"], gpus=True)
    assert p.acs_redirect == ("82:00.0", "82:01.0", "82:02.0", "82:03.0") and p.acs_on_path == ()
    node = _node(IPS[0], platform=p)
    (acs,) = [c for c in platform_checks.checks(node) if c.name == "PCIe ACS"]
    assert acs.status == "ok" and "4 device(s) off those paths do" in acs.detail
    # a GPU behind a redirecting port: named, with the fix and NCCL's guide
    behind = tmp_path / "behind"
    _pci_tree(behind, ["pci0000:80/0000:80:01.0/0000:81:00.0/0000:82:01.0/0000:83:00.0"])
    p = platform.read(str(behind), lambda cmd: both, ["0000:83:00.0"], gpus=True)
    (acs,) = [c for c in platform_checks.checks(_node(IPS[0], platform=p)) if c.name == "PCIe ACS"]
    assert acs.status == "warn" and "on 1 device(s) (82:01.0; on the GPUs' and NICs' paths)" in acs.detail
    assert "setpci" in acs.hint and "pci-access-control-services-acs" in acs.hint
    # no PCIe tree to read: every redirecting device is judged, and said so
    p = platform.read(str(tmp_path / "none"), lambda cmd: on, [], gpus=True)
    (acs,) = [c for c in platform_checks.checks(_node(IPS[0], platform=p)) if c.name == "PCIe ACS"]
    assert acs.status == "warn" and "the PCIe tree not read" in acs.detail


def test_acs_that_cannot_be_read_is_skipped_with_the_reason(tmp_path):
    def missing(cmd):
        raise FileNotFoundError(cmd[0])

    p = platform.read(str(tmp_path), missing, [], gpus=True)
    assert p.acs_redirect is None and p.unread == ("PCIe ACS: lspci not installed (pciutils)",)
    (acs,) = [c for c in platform_checks.checks(_node(IPS[0], platform=p)) if c.name == "PCIe ACS"]
    assert (acs.status, acs.detail) == ("skip", "not read: lspci not installed (pciutils)")
    denied = "18:00.0 3D controller: NVIDIA Corporation Device 2330\n\tCapabilities: <access denied>\n"
    assert platform.read(str(tmp_path), lambda cmd: denied, [], gpus=True).acs_redirect is None
    # one GPU and no NIC: no PCIe peer-to-peer to judge, no ACS or IOMMU check at all
    lone = _node(IPS[0], gpus=1, nics=0, platform=p)
    assert not [c for c in platform_checks.checks(lone) if c.name in ("PCIe ACS", "IOMMU")]


@pytest.mark.parametrize("group_type, cmdline, mode, status", [
    ("DMA-FQ", None, "translated", "warn"),
    ("DMA", None, "translated", "warn"),
    ("identity", None, "passthrough", "ok"),
    (None, "doctor/proc_cmdline_iommu_pt_rtx_pro_6000.txt", "passthrough", "ok"),
    (None, "doctor/proc_cmdline_iommu_pt_mi100_rccl.txt", "passthrough", "ok"),
    (None, "intel_iommu=on", "translated", "warn"),
    (None, "ro quiet", None, "skip"),
])
def test_the_iommus_mode_from_the_devices_groups_else_the_command_line(tmp_path, group_type, cmdline, mode, status):
    gpu = "0000:18:00.0"
    if group_type:
        group = tmp_path / "sys/kernel/iommu_groups/31"
        group.mkdir(parents=True)
        (group / "type").write_text(group_type + "\n")
        (tmp_path / "sys/bus/pci/devices" / gpu).mkdir(parents=True)
        os.symlink(group, tmp_path / "sys/bus/pci/devices" / gpu / "iommu_group")
    if cmdline:
        (tmp_path / "proc").mkdir()
        text = _text(cmdline).split("\n", 2)[2] if cmdline.endswith(".txt") else cmdline
        (tmp_path / "proc/cmdline").write_text(text)
    p = platform.read(str(tmp_path), lambda cmd: "", [gpu], gpus=False)
    assert p.iommu == mode
    (check,) = [c for c in platform_checks.checks(_node(IPS[0], platform=p)) if c.name == "IOMMU"]
    assert check.status == status
    if status == "warn":
        assert "iommu=pt" in check.hint and "#iommu" in check.hint


def test_no_iommu_group_at_all_is_off(tmp_path):
    (tmp_path / "sys/kernel/iommu_groups").mkdir(parents=True)
    assert platform.read(str(tmp_path), lambda cmd: "", [], gpus=False).iommu == "off"


def _sys_from_show_gids(text: str, root: Path, keep=lambda gid: True) -> None:
    """The /sys/class/infiniband files of a RoCE port for what `show_gids` printed of it: gids/INDEX
    holds each GID (the kernel shows the all-zero GID at an unused index; a sparse table's first
    indexes are such), the port active at 100 Gb/s over Ethernet."""
    rows = [line.split() for line in text.splitlines() if line.startswith("mlx5_")]
    dev, port = rows[0][0], rows[0][1]
    d = root / "sys/class/infiniband" / dev / "ports" / port
    (d / "gids").mkdir(parents=True)
    (d / "state").write_text("4: ACTIVE\n")
    (d / "rate").write_text("100 Gb/sec (2X HDR)\n")
    (d / "link_layer").write_text("Ethernet\n")
    for i in range(int(rows[-1][2]) + 2):
        (d / "gids" / str(i)).write_text("0000:0000:0000:0000:0000:0000:0000:0000\n")
    for row in rows:
        if keep(row[3]):
            (d / "gids" / row[2]).write_text(row[3] + "\n")


@pytest.mark.parametrize("name", ["show_gids_roce.txt", "show_gids_roce_sparse_k8s.txt"])
def test_a_roce_port_without_a_routable_gid_fails(tmp_path, name):
    text = _text(f"doctor/{name}")
    _sys_from_show_gids(text, tmp_path / "real")
    (dev,) = rdma_devices(str(tmp_path / "real"))
    assert len(dev.ports[0].gids) == (6 if name == "show_gids_roce.txt" else 4)  # every non-zero GID, sparse too
    assert not [c for c in platform_checks.checks(_node(IPS[0], rdma=(dev,))) if c.name.endswith("GID")]
    # the same port with its IPv4 GIDs gone (no address on its netdev): only link-local ones left
    _sys_from_show_gids(text, tmp_path / "no_ip", keep=lambda gid: gid.startswith("fe80:"))
    (dev,) = rdma_devices(str(tmp_path / "no_ip"))
    (gid,) = [c for c in platform_checks.checks(_node(IPS[0], rdma=(dev,))) if c.name == "mlx5_0 GID"]
    assert gid.status == "fail" and gid.detail.startswith("RoCE port 1 has only link-local GIDs")
    _sys_from_show_gids(text, tmp_path / "none", keep=lambda gid: False)
    (dev,) = rdma_devices(str(tmp_path / "none"))
    (gid,) = [c for c in platform_checks.checks(_node(IPS[0], rdma=(dev,))) if c.name == "mlx5_0 GID"]
    assert gid.detail.startswith("RoCE port 1 has no GID")


def test_nvlink_fabric_readiness_from_recorded_fabric_sections():
    clique2 = tuple(parse_fabric(_text("nvidia_smi/mnnvl_fabric_unhealthy_clique2.txt")))
    unready = tuple(parse_fabric(_text("nvidia_smi/mnnvl_fabric_insufficient_resources.txt")))
    hgx = tuple(parse_fabric(_text("nvidia_smi/h100_fabric_completed_zero_uuid_560.txt")))
    no_channel = platform.Platform(imex_channels=None)
    checks = {c.name: c for c in platform_checks.checks(_node(IPS[0], fabric=clique2, platform=no_channel))}
    assert checks["IMEX channel"].status == "fail" and "nvidia-caps-imex-channels" in checks["IMEX channel"].detail
    assert checks["NVLink fabric"].status == "warn" and "Unhealthy" in checks["NVLink fabric"].detail
    (fabric,) = [c for c in platform_checks.checks(_node(IPS[0], fabric=unready)) if c.name == "NVLink fabric"]
    assert fabric.status == "fail" and "State Completed, Status Insufficient Resources" in fabric.detail
    # an HGX node's own NVSwitches (Completed/Success, zero UUID): no multi-node fabric, nothing to say
    assert not [c for c in platform_checks.checks(_node(IPS[0], fabric=hgx)) if "NVLink" in c.name or "IMEX" in
                c.name]


def test_the_odd_node_out_is_named_with_its_value_and_a_cpu_head_is_not():
    nodes = [_node(ip) for ip in IPS] + [_node("10.0.0.9", gpus=0, nics=0)]  # a CPU head
    nodes[1] = _node(IPS[1], gpus=7)
    nodes[2] = _node(IPS[2], nics=7, platform=platform.Platform(kernel="6.8.0-49"))
    nodes[3] = _node(IPS[3], rdma=tuple(_nic(f"mlx5_{i}", rate=200.0 if i == 5 else 400.0) for i in range(8)))
    cluster, per_node = fleet.odd_ones_out(nodes)
    by = {c.name: c for c in cluster}
    assert by["same GPU count"].status == "fail" and by["same GPU count"].detail == "GPUs 8 on 3 node(s); 7 on 10.0.0.2"
    assert [(c.name, c.detail) for c in per_node[IPS[1]]] == [("same GPU count", "GPUs 7 where the others have 8")]
    assert {c.name for c in per_node[IPS[2]]} == {"same RDMA NICs", "same NIC rates", "same kernel"}
    assert next(c for c in per_node[IPS[3]] if c.name == "same NIC rates").detail == \
        "RDMA ports at 1x 200 Gb/s, 7x 400 Gb/s where the others have 8x 400 Gb/s"
    assert not per_node["10.0.0.9"] and not per_node[IPS[0]]
    assert by["same CUDA"].status == "ok" and by["same NIC firmware"].status == "ok"


def test_a_node_in_another_clique_of_its_fabric_is_named():
    clique2 = tuple(parse_fabric(_text("nvidia_smi/mnnvl_fabric_unhealthy_clique2.txt")))
    moved = tuple(g.__class__(g.bus_id, g.state, g.status, 3, g.cluster_uuid, g.health) for g in clique2)
    nodes = [_node(ip, fabric=clique2) for ip in IPS]
    nodes[3] = _node(IPS[3], fabric=moved)
    cluster, per_node = fleet.odd_ones_out(nodes)
    clique = next(c for c in cluster if c.name == "same NVLink clique")
    assert clique.status == "warn" and clique.detail == "fabric dc6e40c4: clique 2 on 3 node(s); 3 on 10.0.0.4"
    assert [c.name for c in per_node[IPS[3]]] == ["same NVLink clique"]


def test_junit_has_a_case_per_check_with_failures_and_skips_as_ci_reads_them():
    cases = [{"classname": "cluster", "name": "same torch", "status": "ok", "message": "torch 2.13 on every node"},
             {"classname": "h3 (10.0.0.3)", "name": "NCCL_CHUNK_SIZE", "status": "fail", "message": "wrong results",
              "text": "unset it"},
             {"classname": "h3 (10.0.0.3)", "name": "PCIe ACS", "status": "skip", "message": "not read"},
             {"classname": "h4 (10.0.0.4)", "name": "IOMMU", "status": "warn", "message": "translated"}]
    suite = ET.fromstring(render_junit("collbench doctor", cases).split("\n", 1)[1]).find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("4", "1", "1")
    got = [(c.get("classname"), c.get("name"), [child.tag for child in c]) for c in suite.iter("testcase")]
    assert got == [("cluster", "same torch", ["system-out"]), ("h3 (10.0.0.3)", "NCCL_CHUNK_SIZE", ["failure"]),
                   ("h3 (10.0.0.3)", "PCIe ACS", ["skipped"]), ("h4 (10.0.0.4)", "IOMMU", ["system-out"])]
    failure = suite.find("testcase/failure")
    assert failure.get("message") == "wrong results" and failure.text == "unset it"


def test_the_checks_page_names_every_check_doctor_makes():
    """docs/reference/doctor-checks.md lists every check by its name (a literal one in doctor's
    code, and the fleet's), so a new check cannot land unlisted."""
    import re

    root = Path(__file__).resolve().parents[2]
    page = (root / "docs" / "reference" / "doctor-checks.md").read_text()
    code = "\n".join(p.read_text() for p in (root / "orchestrator" / "doctor").glob("*.py"))
    names = set(re.findall(r'Check\("([^"]+)"', code)) | {name for name, *_ in fleet.FLEET} | {"same NVLink clique"}
    assert len(names) > 25
    assert sorted(n for n in names if f"`{n}`" not in page) == []
