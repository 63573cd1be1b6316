"""doctor's readers on what real machines printed (tests/fixtures/doctor: each file names its
source and the machine; README.md there), and the checks those facts lead to: a healthy H100,
an A100 with a row remap pending, an A10G whose link runs at x8 of x16, a V100 held down by HW
slowdown and power brake, the old "Clocks Throttle Reasons" labels and the 580 driver's counters,
NVLink status with two links inactive, and InfiniBand/RoCE ports from ibstat as /sys shows them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator.doctor import checks as ck
from orchestrator.doctor import facts as fx
from workloads.comm_env import interface_for_ip

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "doctor"


def _text(name: str) -> str:
    body = (FIXTURES / name).read_text().splitlines()
    # a public post, or collbench's own GPU check on a machine it ran on (docs/GPU.md, Runs)
    assert body[0].startswith(("# source: https://", "# source: collbench's ")) and body[1].startswith("# machine: ")
    return "\n".join(body[2:])


def _checks(gpu: fx.Gpu) -> dict[str, ck.Check]:
    return {c.name.split(" ", 2)[-1]: c for c in ck._gpu(gpu, 8, False)}  # one GPU of an 8-GPU node


def test_a_healthy_h100():
    driver, (g,) = fx.parse_smi_q(_text("nvidia_smi_q_h100_healthy.txt"))
    assert driver == "535.183.01"
    assert (g.name, g.bus_id, g.persistence, g.mig) == ("NVIDIA H100 80GB HBM3", "00000000:53:00.0", "Enabled",
                                                        "Disabled")
    assert (g.ecc_uncorrected, g.remapped_pending, g.remap_failure) == (0, 0, False)
    assert g.events == 0x1  # Idle only
    assert (g.pcie_gen, g.pcie_width) == ((5, 5), (16, 16))
    assert not [c for c in ck._gpu(g, 8, False) if c.status != "ok"]


def test_a_row_remap_pending_fails_its_gpu():
    driver, gpus = fx.parse_smi_q(_text("nvidia_smi_q_a100_remap_pending.txt"))
    assert driver == "510.73.08" and gpus[0].remapped_pending == 1 and gpus[0].remap_failure is False
    found = _checks(gpus[0])
    assert found["row remap"].status == "fail" and "reset the GPU" in found["row remap"].hint


def test_a_link_at_x8_of_x16_is_named():
    _, (g,) = fx.parse_smi_q(_text("nvidia_smi_q_a10g_link_x8_of_x16.txt"))
    assert g.name == "NVIDIA A10G" and g.pcie_width == (8, 16) and g.persistence == "Disabled"
    found = _checks(g)
    assert found["PCIe"].status == "fail" and found["PCIe"].detail == "link x8 of x16"
    assert found["persistence"].status == "warn"


def test_hw_slowdown_and_power_brake_fail_the_gpu_on_the_old_labels():
    _, (g,) = fx.parse_smi_q(_text("nvidia_smi_q_v100_hw_power_brake.txt"))  # "Clocks Throttle Reasons"
    assert g.events == 0x8 | 0x80
    clocks = _checks(g)["clocks"]
    assert clocks.status == "fail" and clocks.detail == "clocks held down: HW slowdown, HW power brake (0x88)"
    _, (old,) = fx.parse_smi_q(_text("nvidia_smi_q_old_clocks_throttle_reasons_2018.txt"))
    assert old.events == 0x1 and "clocks" not in _checks(old)  # idle is no fault


def test_the_580_drivers_counters_are_not_current_reasons():
    driver, gpus = fx.parse_smi_q(_text("nvidia_smi_q_clocks_event_counters_580.txt"))
    assert driver == "580.105.06" and gpus[0].events == 0  # SW Power Capping accrued time, nothing active now


def test_a_healthy_h200_alone_in_a_vm():
    """Recorded by the GPU check on the device tool's one-H200 VM: a healthy GPU, and an NVLink
    status that is empty (the VM exposes no link): no NVLink check, nothing failed or warned."""
    driver, (g,) = fx.parse_smi_q(_text("nvidia_smi_q_h200_one_gpu_vm_580.txt"))
    assert driver == "580.159.04"
    assert (g.name, g.bus_id, g.persistence, g.mig) == ("NVIDIA H200", "00000000:00:06.0", "Enabled", "Disabled")
    assert (g.ecc_uncorrected, g.remapped_pending, g.remap_failure, g.events) == (0, 0, False, 0x1)  # Idle only
    assert (g.pcie_gen, g.pcie_width) == ((5, 5), (16, 16))
    assert fx.parse_nvlink_status(_text("nvlink_status_h200_one_gpu_vm_empty.txt")) == {}
    assert not [c for c in ck._gpu(g, 1, False) if c.status != "ok"] and "NVLink" not in _checks(g)


def test_nvlink_status():
    healthy = fx.parse_nvlink_status(_text("nvlink_status_h100_healthy.txt"))
    assert healthy == {0: (18, 0)}
    degraded = fx.parse_nvlink_status(_text("nvlink_status_v100_two_inactive.txt"))
    assert degraded == {3: (4, 2)}
    gpu = fx.Gpu(3, "Tesla V100-SXM2-32GB", "?", nvlinks_active=4, nvlinks_inactive=2)
    assert _checks(gpu)["NVLink"].detail == "2 NVLink link(s) inactive, 4 up"


def _sys_from_ibstat(text: str, root: Path) -> None:
    """The /sys/class/infiniband files a device shows for what `ibstat` printed of it (the kernel's
    own words: state "1: DOWN" / "4: ACTIVE", rate "N Gb/sec", link_layer)."""
    states = {"Down": "1: DOWN", "Initializing": "2: INIT", "Armed": "3: ARMED", "Active": "4: ACTIVE"}
    for block in re.split(r"(?m)^CA '", text)[1:]:
        name = block.split("'", 1)[0]
        for port, body in re.findall(r"Port (\d+):\n((?:\s{8}.*\n?)+)", block):
            fields = dict(re.findall(r"^\s+([A-Za-z ]+): (.*)$", body, flags=re.M))
            d = root / "sys/class/infiniband" / name / "ports" / port
            d.mkdir(parents=True, exist_ok=True)
            (d / "state").write_text(states[fields["State"]] + "\n")
            (d / "rate").write_text(f"{fields['Rate']} Gb/sec\n")
            (d / "link_layer").write_text(fields["Link layer"] + "\n")


def test_rdma_ports_as_sys_shows_them(tmp_path):
    _sys_from_ibstat(_text("ibstat_ib_cx7_down_polling.txt"), tmp_path / "down")
    (dev,) = fx.rdma_devices(str(tmp_path / "down"))
    assert (dev.name, dev.kind) == ("mlx5_10", "IB") and dev.ports == (fx.Port(1, "DOWN", 10.0, "InfiniBand"),)
    node = fx.NodeFacts("10.0.0.1", rdma=(dev,), memlock_bytes=None, dev_infiniband=True)
    port = next(c for c in ck.node_checks(node) if c.name == "mlx5_10 port")
    assert port.status == "fail" and port.detail == "port 1 DOWN"
    _sys_from_ibstat(_text("ibstat_roce_cx6dx_100g_active.txt"), tmp_path / "roce")
    devices = fx.rdma_devices(str(tmp_path / "roce"))
    assert {d.kind for d in devices} == {"RoCE"} and all(p.state == "ACTIVE" for d in devices for p in d.ports)
    healthy = fx.NodeFacts("10.0.0.2", rdma=tuple(devices), memlock_bytes=None, dev_infiniband=True)
    assert [c.status for c in ck.node_checks(healthy) if c.name.startswith(("mlx", "RDMA"))] == ["ok"]


@pytest.mark.parametrize("line, ip, iface", [
    ("2: eth0    inet 10.0.0.5/24 brd 10.0.0.255 scope global eth0\\       valid_lft forever", "10.0.0.5", "eth0"),
    ("7: cbt1n@if8    inet 10.214.7.12/24 scope global cbt1n", "10.214.7.12", "cbt1n"),
    ("1: lo    inet 127.0.0.1/8 scope host lo", "10.0.0.5", None),
])
def test_the_interface_of_the_nodes_address(line, ip, iface):
    assert interface_for_ip(ip, line) == iface
