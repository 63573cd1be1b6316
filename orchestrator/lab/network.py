"""The lab's network (orchestrator.lab.cluster builds the rest): one network namespace per node, its
veth on a bridge, both ends shaped with `tc tbf` at the node's link rate. With leaves, the nodes'
veths hang on leaf bridges joined to the spine bridge (the head's) by one veth pair each, the leaf's
uplink, shaped at its own rate (issue 46): traffic inside a leaf crosses two node links, traffic
across leaves two node links and two uplinks. Every name made is recorded in the lab's state
before it is made, so `remove` takes exactly that away."""

from __future__ import annotations

import ipaddress
import os
import re
import subprocess
import time

from orchestrator.errors import UsageError

_RATE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit)$", re.IGNORECASE)
_RATE_SCALE = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}


class LabError(RuntimeError):
    pass


def link_rate_bps(text: str, flag: str = "--link") -> float:
    """`1gbit` -> 1e9 bits per second (tc's units, powers of 1000)."""
    m = _RATE.match(text.strip())
    if not m:
        raise UsageError(f"{flag} {text!r}: expected a rate such as 400mbit or 1gbit")
    return float(m.group(1)) * _RATE_SCALE[m.group(2).lower()]


def build(st) -> None:
    """The lab's bridges, namespaces and veths, shaped (`st`: cluster.LabState, saved as it grows)."""
    prefix = ipaddress.ip_network(st.subnet).prefixlen
    st.bridge = f"cb{st.name}br"
    st.save()
    _ip("link", "add", st.bridge, "type", "bridge")
    _ip("addr", "add", f"{st.head_ip}/{prefix}", "dev", st.bridge)
    _ip("link", "set", st.bridge, "up")
    for k in range(st.leaves if st.leaves > 1 else 0):  # a leaf: its bridge, and its uplink to the spine's
        leaf, down_end, up_end = f"cb{st.name}L{k}", f"cb{st.name}U{k}l", f"cb{st.name}U{k}s"
        st.leaf_bridges.append(leaf)
        st.veths.append(up_end)
        st.save()
        _ip("link", "add", leaf, "type", "bridge")
        _ip("link", "set", leaf, "up")
        _ip("link", "add", down_end, "type", "veth", "peer", "name", up_end)
        _ip("link", "set", down_end, "master", leaf, "up")
        _ip("link", "set", up_end, "master", st.bridge, "up")
        _shape_uplink(st, k, st.uplink_of(k), "add")
    for i in range(st.nodes):
        ns, host_end, node_end = f"cb-{st.name}-{i}", f"cb{st.name}{i}h", f"cb{st.name}{i}n"
        st.namespaces.append(ns)
        st.veths.append(host_end)
        st.save()
        _ip("netns", "add", ns)
        _ip("link", "add", host_end, "type", "veth", "peer", "name", node_end)
        _ip("link", "set", node_end, "netns", ns)
        _ip("link", "set", host_end, "master", st.leaf_bridges[st.leaf_of(i)] if st.leaf_bridges else st.bridge, "up")
        _ip("-n", ns, "addr", "add", f"{st.node_ip(i)}/{prefix}", "dev", node_end)
        _ip("-n", ns, "link", "set", node_end, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        _shape(st, i, st.link_of(i), "add")


def remove(st) -> list[str]:
    """Delete the namespaces, veths and bridges `st` records; what could not be deleted."""
    problems = []
    for ns in st.namespaces:
        if exists_netns(ns) and subprocess.run(["ip", "netns", "del", ns], check=False,
                                                capture_output=True).returncode:
            problems.append(f"namespace {ns}")
    for dev in [*st.veths, *st.leaf_bridges, st.bridge]:
        if dev and exists_link(dev) and subprocess.run(["ip", "link", "del", dev], check=False,
                                                        capture_output=True).returncode:
            time.sleep(0.5)  # a veth whose peer's namespace was just deleted goes away by itself
            if exists_link(dev):
                problems.append(f"link {dev}")
    return problems


def shape_uplink(st, k: int, rate: str) -> None:
    """Shape leaf k's uplink anew at `rate`, both ends: a slow switch planted, or lifted."""
    _shape_uplink(st, k, rate, "change")


def _shape_uplink(st, k: int, rate: str, verb: str) -> None:
    for dev in (f"cb{st.name}U{k}l", f"cb{st.name}U{k}s"):
        _run(["tc", "qdisc", verb, "dev", dev, *_tbf(rate)])


def _tbf(rate: str) -> list[str]:
    # tbf needs a bucket of at least one timer tick's worth of bytes to reach its rate.
    burst = max(128 * 1024, int(link_rate_bps(rate) / 8 / 100))
    return ["root", "tbf", "rate", rate, "burst", str(burst), "latency", "50ms"]


def set_mtu(st, i: int, mtu: int) -> None:
    """Node i's interface at MTU `mtu` (a planted misconfiguration: doctor names the node)."""
    _run(["ip", "-n", st.namespaces[i], "link", "set", "dev", f"cb{st.name}{i}n", "mtu", str(mtu)])


def block_inbound(st, i: int) -> None:
    """A firewall on node i that drops new inbound TCP connections to its ephemeral ports, where
    gloo's and NCCL's sockets listen, as a security group or host firewall would; the node's Ray
    keeps working (its listeners at the time and every established connection stay allowed)."""
    ns = st.namespaces[i]
    listening = subprocess.run(["ip", "netns", "exec", ns, "ss", "-ltnH"], capture_output=True, text=True,
                               check=True).stdout
    ports = sorted({int(m.group(1)) for m in re.finditer(r":(\d+)\s", listening)})
    rules = [["-A", "INPUT", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
             *(["-A", "INPUT", "-p", "tcp", "--dport", str(p), "-j", "ACCEPT"] for p in ports),
             ["-A", "INPUT", "-p", "tcp", "--dport", "32768:60999", "-j", "DROP"]]
    for rule in rules:
        _run(["ip", "netns", "exec", ns, "iptables", *rule])


def unblock(st, i: int) -> None:
    _run(["ip", "netns", "exec", st.namespaces[i], "iptables", "-F", "INPUT"])


def shape_link(st, i: int, rate: str) -> None:
    """Shape node i's link anew at `rate`, both ends (its veth on the bridge and its peer in the
    namespace), as `up` shaped them: a fault planted, or lifted, while the lab runs."""
    _shape(st, i, rate, "change")


def _shape(st, i: int, rate: str, verb: str) -> None:
    _run(["tc", "qdisc", verb, "dev", f"cb{st.name}{i}h", *_tbf(rate)])
    _run(["ip", "netns", "exec", st.namespaces[i], "tc", "qdisc", verb, "dev", f"cb{st.name}{i}n", *_tbf(rate)])


def netns_pids(ns: str) -> list[int]:
    """Processes whose network namespace is `ns` (Ray renames its processes: match by inode)."""
    try:
        target = os.stat(f"/run/netns/{ns}").st_ino
    except OSError:
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}/ns/net").st_ino == target:
                    pids.append(int(entry))
            except OSError:
                continue
    return pids


def exists_netns(ns: str) -> bool:
    return os.path.exists(f"/run/netns/{ns}")


def exists_link(dev: str) -> bool:
    return os.path.exists(f"/sys/class/net/{dev}")


def _ip(*args: str) -> None:
    _run(["ip", *args])


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if proc.returncode:
        raise LabError(f"`{' '.join(cmd)}` failed: {proc.stderr.strip() or proc.returncode}")
