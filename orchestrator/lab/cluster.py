"""A real multi-node Ray cluster on one Linux machine: one network namespace per node on a
bridge, inter-node links shaped with `tc tbf`, token authentication, private temp dir and ports.

The head runs in the root namespace on the bridge address, advertising no CPUs, so it holds no
ranks and a driver in the root namespace joins it directly; node i is namespace `cb-NAME-i` at
10.X.0.(10+i). Traffic inside a namespace uses its loopback (unshaped); traffic between nodes
crosses two veths, each shaped to the link rate in both directions.

Everything `up` creates is recorded in a state file before it is created, so `down` (and a
failed `up`) removes exactly that: processes by session id and by network namespace, then the
namespaces, veths and bridge. Never `ray stop`.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field

from orchestrator.errors import UsageError
from orchestrator.lab import network, raynodes
from orchestrator.lab.network import (  # the network's names the lab's users (tests, benchmarks) reach here
    LabError,
    block_inbound,
    link_rate_bps,
    netns_pids,
    set_mtu,
    shape_link,
    shape_uplink,
    unblock,
)

__all__ = ["LabError", "LabState", "block_inbound", "down", "link_rate_bps", "load", "netns_pids", "set_mtu",
           "shape_link", "shape_uplink", "unblock", "up"]






@dataclass
class LabState:
    name: str
    nodes: int
    ranks_per_node: int
    link: str
    subnet: str
    state_dir: str
    temp_dir: str
    port: int = 0
    bridge: str = ""
    namespaces: list[str] = field(default_factory=list)
    veths: list[str] = field(default_factory=list)
    sessions: list[int] = field(default_factory=list)
    node_links: dict[str, str] = field(default_factory=dict)  # node index -> its own rate (a planted slow link)
    declared: bool = True  # False: no platform tag, no expected rate (a plain cluster, as most on-prem fabrics)
    node_env: dict[str, dict[str, str]] = field(default_factory=dict)  # node index -> variables its Ray gets
    leaves: int = 1  # leaf switches (bridges) the nodes hang on, in blocks; 1: every node on the spine's
    uplink: str = ""  # each leaf's uplink rate ("": the sum of its nodes' links, a non-blocking fabric)
    leaf_links: dict[str, str] = field(default_factory=dict)  # leaf index -> its own uplink rate (a slow switch)
    leaf_bridges: list[str] = field(default_factory=list)

    def link_of(self, i: int) -> str:
        return self.node_links.get(str(i), self.link)

    def leaf_of(self, i: int) -> int:
        return i * self.leaves // self.nodes

    def uplink_of(self, k: int) -> str:
        kbit = max(1, int(link_rate_bps(self.link) * sum(self.leaf_of(i) == k for i in range(self.nodes)) / 1e3))
        return self.leaf_links.get(str(k)) or self.uplink or (f"{kbit}kbit" if kbit % 1000 else f"{kbit // 1000}mbit")

    @property
    def topology_path(self) -> str:
        """The lab's switch tree as Slurm's topology.conf (nodes by IP): `report --topology` reads it."""
        return os.path.join(self.state_dir, "topology.conf")

    @property
    def expected_path(self) -> str:
        return os.path.join(self.state_dir, "expected.yaml")

    @property
    def head_ip(self) -> str:
        return str(ipaddress.ip_network(self.subnet)[1])

    def node_ip(self, i: int) -> str:
        return str(ipaddress.ip_network(self.subnet)[10 + i])

    @property
    def address(self) -> str:
        return f"{self.head_ip}:{self.port}"

    def auth_env(self) -> dict[str, str]:
        """Token authentication with the lab's own token (made at `up`, removed at `down`)."""
        return raynodes.auth_env(os.path.join(self.state_dir, "auth_token"))

    def save(self) -> None:
        tmp = os.path.join(self.state_dir, ".state.json.tmp")
        with open(tmp, "w") as f:
            json.dump(asdict(self), f, indent=1)
        os.replace(tmp, state_path(self.name))


def state_dir(name: str) -> str:
    return f"/tmp/collbench-lab-{name}"


def state_path(name: str) -> str:
    return os.path.join(state_dir(name), "state.json")


def load(name: str) -> LabState:
    try:
        with open(state_path(name)) as f:
            return LabState(**json.load(f))
    except FileNotFoundError:
        raise UsageError(f"--name {name}: no lab of that name is up (no {state_path(name)})") from None


def parse_node_links(items: list[str] | None, nodes: int, flag: str = "--node-link",
                     what: str = "node") -> dict[str, str]:
    """`--node-link I=RATE` (`--leaf-link`) items -> {"I": RATE}: each index one of `nodes`, each rate valid."""
    out = {}
    for item in items or []:
        index, sep, rate = item.partition("=")
        if not sep or not index.isdigit() or int(index) >= nodes:
            raise UsageError(f"{flag} {item!r}: expected {what.upper()}=RATE with {what.upper()} in 0..{nodes - 1}, "
                             "such as 1=500mbit")
        link_rate_bps(rate)
        out[str(int(index))] = rate
    return out


def check_host(name: str, nodes: int, ranks_per_node: int, link: str, subnet: str, leaves: int = 1) -> None:
    """Refuse what cannot work, before creating anything."""
    if not re.fullmatch(r"[a-z][a-z0-9]{0,5}", name):
        raise UsageError(f"--name {name!r}: 1-6 lower-case letters or digits, starting with a letter")
    if nodes < 1 or nodes > 200:
        raise UsageError(f"--nodes {nodes}: must be between 1 and 200")
    if ranks_per_node < 1:
        raise UsageError(f"--ranks-per-node {ranks_per_node}: must be at least 1")
    link_rate_bps(link)
    try:
        net = ipaddress.ip_network(subnet)
    except ValueError:
        raise UsageError(f"--subnet {subnet!r}: not an IPv4 network such as 10.213.0.0/24") from None
    if net.num_addresses < nodes + 12:
        raise UsageError(f"--subnet {subnet}: too small for {nodes} nodes")
    if os.geteuid() != 0:
        raise UsageError("collbench lab needs root (network namespaces, veths and tc)")
    if not shutil.which("ip") or not shutil.which("tc"):
        raise UsageError("collbench lab needs iproute2 (`ip` and `tc`)")
    if os.path.exists(state_path(name)):
        raise UsageError(f"--name {name}: a lab of that name is already up (collbench lab down --name {name})")
    # Names are recorded before they are created, so none of them may exist already: `down`
    # must never remove something this lab did not make.
    for dev in [f"cb{name}br", *(f"cb{name}{i}{end}" for i in range(nodes) for end in "hn"),
                *(f"cb{name}{x}" for k in range(leaves if leaves > 1 else 0) for x in (f"L{k}", f"U{k}l", f"U{k}s"))]:
        if network.exists_link(dev):
            raise UsageError(f"--name {name}: network interface {dev} already exists")
    listing = subprocess.run(["ip", "-o", "-4", "addr"], check=False, capture_output=True, text=True).stdout
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) >= 4 and ipaddress.ip_interface(fields[3]).ip in net:
            raise UsageError(f"--subnet {subnet}: already in use on interface {fields[1]} ({fields[3]})")
    for i in range(nodes):
        if network.exists_netns(f"cb-{name}-{i}"):
            raise UsageError(f"--name {name}: network namespace cb-{name}-{i} already exists")


def up(name: str, nodes: int, ranks_per_node: int, link: str, subnet: str, timeout_s: float = 120.0,
       node_links: dict[str, str] | None = None, declared: bool = True, start_ray: bool = True,
       node_env: dict[str, dict[str, str]] | None = None, leaves: int = 1, uplink: str = "",
       leaf_links: dict[str, str] | None = None) -> LabState:
    """The lab: its network and, unless `start_ray` is False, a Ray node in every namespace (without
    Ray, the namespaces are bare hosts for something else to start Ray on, such as `ray up`)."""
    check_host(name, nodes, ranks_per_node, link, subnet, leaves)
    os.makedirs(state_dir(name), exist_ok=True)
    st = LabState(name, nodes, ranks_per_node, link, subnet, state_dir(name), f"/tmp/cbl-{name}",
                  node_links=dict(node_links or {}), declared=declared,
                  node_env={str(k): dict(v) for k, v in (node_env or {}).items()}, leaves=leaves, uplink=uplink,
                  leaf_links=dict(leaf_links or {}))
    st.save()
    if declared:
        _declare(st)
    with open(st.topology_path, "w") as f:
        f.write(f"# collbench lab {name}: {st.leaves} leaf switch(es) under the spine\n")
        for k in range(max(st.leaves, 1)):
            f.write(f"SwitchName=leaf{k} Nodes={','.join(st.node_ip(i) for i in range(nodes) if st.leaf_of(i) == k)}\n")
        f.write(f"SwitchName=spine Switches={','.join(f'leaf{k}' for k in range(max(st.leaves, 1)))}\n")
    try:
        network.build(st)
        if start_ray:
            _start_ray(st, timeout_s)
    except BaseException:
        down(st)
        raise
    return st


def _start_ray(st: LabState, timeout_s: float) -> None:
    os.makedirs(st.temp_dir, exist_ok=True)
    st.port = raynodes.free_port()
    log = os.path.join(st.state_dir, "head.log")
    st.sessions.append(
        raynodes.ray_start(
            ["--head", f"--port={st.port}", f"--node-ip-address={st.head_ip}", f"--temp-dir={st.temp_dir}",
             "--num-cpus=0", "--include-dashboard=false", "--object-store-memory=100000000",
             *raynodes.private_port_args(head=True)],
            log, env=st.auth_env(),
        )
    )
    st.save()
    if not raynodes.wait_port(st.head_ip, st.port, timeout_s):
        raise LabError(f"the lab's Ray head did not open {st.address}; {raynodes.log_tail(log)}")
    # One node at a time: nodes started together race for the same socket names in the
    # shared session directory ("bind: Address already in use" in the raylet).
    for i, ns in enumerate(st.namespaces):
        st.sessions.append(
            raynodes.ray_start(
                [f"--address={st.address}", f"--node-ip-address={st.node_ip(i)}", f"--num-cpus={st.ranks_per_node}",
                 "--object-store-memory=100000000"],
                os.path.join(st.state_dir, f"node{i}.log"), netns=ns,
                env={**st.auth_env(), **_platform_env(st), **st.node_env.get(str(i), {})},
            )
        )
        st.save()
        _wait_nodes(st, i + 1, timeout_s)


def _platform_env(st: LabState) -> dict[str, str]:
    """A declared lab is platform `lab` with its line rate as expected value; an undeclared one
    sets neither, so its nodes are what collbench detects on this host (no entry applies)."""
    if not st.declared:
        return {}
    return {"COLLBENCH_PLATFORM": "lab", "COLLBENCH_EXPECTED": st.expected_path}


def _declare(st: LabState) -> None:
    """What the lab is, for expected values: every node's link carries the --link rate, which a
    2-rank all_reduce across it reaches (gloo's ring; its all_gather and send/recv reach 60-90%
    of it on these machines, a property of gloo, not of the link). A node given its own rate with
    --node-link is a planted fault, not part of the declaration."""
    entry = {"platform": "lab", "collective": "all_reduce", "topology": "inter", "min_bytes": "1M",
             "busbw_gbps": link_rate_bps(st.link) / 8e9, "meaning": "line",
             "source": f"collbench lab up --link {st.link}: tc tbf on both ends of every node's link"}
    with open(st.expected_path, "w") as f:
        json.dump({"entries": [entry]}, f, indent=1)  # JSON is YAML


def _wait_nodes(st: LabState, nodes: int, timeout_s: float) -> None:
    """Until `nodes` nodes besides the head are alive (checked from a short-lived client)."""
    script = (
        "import ray,sys; ray.init(address=sys.argv[1], logging_level='ERROR');"
        "print(sum(1 for n in ray.nodes() if n['Alive']))"
    )
    deadline = time.monotonic() + timeout_s
    alive = 0
    while time.monotonic() < deadline:
        proc = subprocess.run(
            [_python(), "-c", script, st.address], check=False, capture_output=True, text=True,
            env={**os.environ, **st.auth_env()}, timeout=max(5.0, deadline - time.monotonic()),
        )
        lines = proc.stdout.strip().splitlines()
        alive = int(lines[-1]) if lines and lines[-1].isdigit() else 0
        if alive == nodes + 1:
            return
        time.sleep(1)
    raise LabError(f"only {max(alive - 1, 0)} of {st.nodes} lab nodes joined within {timeout_s:.0f}s")


def down(st: LabState) -> list[str]:
    """Remove everything recorded in `st`; return what could not be removed."""
    raynodes.stop_sessions(st.sessions, grace_s=2.0)  # `ray start` outlasts a 10-s SIGTERM; nothing to save
    for ns in st.namespaces:
        raynodes.kill_pids(netns_pids(ns), signal.SIGKILL)
    problems = network.remove(st)
    shutil.rmtree(st.temp_dir, ignore_errors=True)
    if not problems:
        shutil.rmtree(st.state_dir, ignore_errors=True)
    return problems


def _python() -> str:
    import sys

    return sys.executable


def run_command(st: LabState) -> str:
    return (
        f"RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH={st.auth_env()['RAY_AUTH_TOKEN_PATH']} collbench run "
        f"--address {st.address} --ranks-per-node {st.ranks_per_node} --patterns intra,inter,mixed,pairwise"
    )
