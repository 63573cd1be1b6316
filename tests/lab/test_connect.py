"""A Ray address behind a link that drops every packet (a namespace of this test's own, reached
through a veth pair whose host side drops all it sends: a token bucket whose burst is smaller
than any packet, since this kernel has no netem or tc filter actions; the neighbour entry is
static, so the SYN itself is dropped, not an ARP request). The connect check gives up within its
timeout with one line, as for a closed or silent loopback port (tests/integration/test_environment.py)."""

from __future__ import annotations

import os
import secrets
import subprocess
import time

import pytest

from tests.helpers import run_cli
from tests.lab.conftest import require_lab


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture
def dropping_address():
    require_lab()
    tag = secrets.token_hex(2)
    ns, host_if, ns_if = f"cbdrop{tag}", f"cbd{tag}a", f"cbd{tag}b"
    used = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True, timeout=30).stdout
    octet = next(o for o in range(20, 250) if f"10.215.{o}." not in used)
    host_ip, ns_ip = f"10.215.{octet}.1", f"10.215.{octet}.2"
    _ip("netns", "add", ns)
    try:
        _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        with open(f"/sys/class/net/{ns_if}/address") as f:
            ns_mac = f.read().strip()
        _ip("link", "set", ns_if, "netns", ns)
        _ip("addr", "add", f"{host_ip}/30", "dev", host_if)
        _ip("link", "set", host_if, "up")
        _ip("-n", ns, "addr", "add", f"{ns_ip}/30", "dev", ns_if)
        _ip("-n", ns, "link", "set", ns_if, "up")
        _ip("neigh", "add", ns_ip, "lladdr", ns_mac, "dev", host_if, "nud", "permanent")
        subprocess.run(["tc", "qdisc", "add", "dev", host_if, "root", "tbf", "rate", "8bit", "burst", "1", "limit", "1"],
                       check=True, capture_output=True, timeout=30)
        yield ns_ip
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


@pytest.mark.lab
def test_an_address_whose_packets_are_dropped(dropping_address, tmp_path):
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), "COLLBENCH_CONNECT_TIMEOUT_S": "6"}
    start = time.monotonic()
    proc = run_cli(["run", "--address", f"{dropping_address}:6379", "--output", str(tmp_path / "out")], env=env,
                   timeout=120)
    took_s = time.monotonic() - start
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        f"collbench: error: --address {dropping_address}:6379: no Ray cluster answered in 6 s (timed out)"]
    assert 5 < took_s < 20, took_s
    assert not (tmp_path / "out").exists() and proc.stdout == ""
