"""Which interface a worker pins (issue 56): NCCL's variable is a list of prefixes, so the pin is
`=NAME` (eth0 beside eth0.100 and eth01); the interface is read from `ip` and, where `ip` is
missing, from the kernel (checked here against `ip`'s own listing of this machine); where neither
can be read doctor says "unreadable", not that no interface holds the address."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from orchestrator.doctor import checks as ck
from orchestrator.doctor import facts as fx
from workloads import comm_env
from workloads.comm_env import interface_holding, kernel_addresses, pins, socket_ifname_matches

NEIGHBOURS = ("eth0", "eth0.100", "eth01", "lo")


def _missing(*args):
    raise FileNotFoundError(2, "No such file or directory", "ip")


def test_nccl_is_pinned_to_the_exact_name_not_a_prefix():
    pinned = pins("eth0")
    assert pinned == {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "=eth0"}
    # the bare name, as NCCL reads it, takes the VLAN and the other NIC too; the pin takes eth0 alone
    assert socket_ifname_matches("eth0", ("eth0.100",)) and socket_ifname_matches("eth0", ("eth01",))
    assert socket_ifname_matches(pinned["NCCL_SOCKET_IFNAME"], ("eth0",))
    assert not socket_ifname_matches(pinned["NCCL_SOCKET_IFNAME"], tuple(n for n in NEIGHBOURS if n != "eth0"))


def test_a_worker_pins_what_the_user_left_unset(monkeypatch):
    for var in comm_env.IFNAME_VARS:  # set, then unset: what pin_interfaces sets goes when the test ends
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    assert comm_env.pin_interfaces("127.0.0.1") == "lo"
    assert (comm_env.os.environ["GLOO_SOCKET_IFNAME"], comm_env.os.environ["NCCL_SOCKET_IFNAME"]) == ("lo", "=lo")
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "^docker")  # the user's choice stands
    monkeypatch.delenv("GLOO_SOCKET_IFNAME")
    comm_env.pin_interfaces("127.0.0.1")
    assert comm_env.os.environ["NCCL_SOCKET_IFNAME"] == "^docker"


@pytest.mark.skipif(shutil.which("ip") is None, reason="no `ip` here to check the kernel's answer against")
def test_the_kernel_says_what_ip_says_where_ip_is_missing():
    listing = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True, check=True).stdout
    primary: dict[str, str] = {}
    for line in listing.splitlines():  # each interface's first address is its primary one
        fields = line.split()
        primary.setdefault(fields[1].split("@")[0], fields[3].split("/")[0])
    assert kernel_addresses() == primary and "lo" in primary
    for name, address in primary.items():
        assert interface_holding(address, ip_addr=_missing) == comm_env.Holder(name, True, "kernel")
        assert interface_holding(address).interface == name and interface_holding(address).how == "ip"
    assert interface_holding("192.0.2.250", ip_addr=_missing) == comm_env.Holder(None, True, "kernel")


def test_neither_readable_is_said_as_such_and_doctor_does_not_call_it_absent(tmp_path):
    def unreadable():
        raise PermissionError(13, "Permission denied")

    held = interface_holding("10.0.0.5", ip_addr=_missing, kernel=unreadable)
    assert held == comm_env.Holder(None, False, "`ip -o -4 addr`: [Errno 2] No such file or directory: 'ip'; "
                                                "/sys/class/net: Permission denied")
    # doctor on a recorded tree (not this node: the kernel is not asked) with no `ip`
    (tmp_path / "sys/class/net/eth0").mkdir(parents=True)
    node = fx.gather("10.0.0.5", root=str(tmp_path), run=_missing, env={}, gpus=False)
    assert (node.interface, node.interface_readable, node.interfaces) == (None, False, ("eth0",))
    assert any(p.startswith("interface: `ip -o -4 addr`: ") for p in node.problems), node.problems
    check = next(c for c in ck.node_checks(node) if c.name == "interface")
    assert check.status == "warn" and check.detail == "unreadable: which interface holds 10.0.0.5 could not be read"
    # readable, and no interface holds it: that is what doctor says
    absent = fx.NodeFacts("10.0.0.5", interface=None, interface_readable=True, interfaces=("eth0", "lo"))
    check = next(c for c in ck.node_checks(absent) if c.name == "interface")
    assert check.detail == "no interface holds the node's address 10.0.0.5"
