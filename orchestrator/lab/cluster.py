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
from orchestrator.lab import raynodes

_RATE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit)$", re.IGNORECASE)
_RATE_SCALE = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}


class LabError(RuntimeError):
    pass


def link_rate_bps(text: str) -> float:
    """`1gbit` -> 1e9 bits per second (tc's units, powers of 1000)."""
    m = _RATE.match(text.strip())
    if not m:
        raise UsageError(f"--link {text!r}: expected a rate such as 400mbit or 1gbit")
    return float(m.group(1)) * _RATE_SCALE[m.group(2).lower()]


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

    def link_of(self, i: int) -> str:
        return self.node_links.get(str(i), self.link)

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


def parse_node_links(items: list[str] | None, nodes: int) -> dict[str, str]:
    """`--node-link I=RATE` items -> {"I": RATE}, each index a node of the lab and each rate valid."""
    out = {}
    for item in items or []:
        index, sep, rate = item.partition("=")
        if not sep or not index.isdigit() or int(index) >= nodes:
            raise UsageError(f"--node-link {item!r}: expected NODE=RATE with NODE in 0..{nodes - 1}, such as 1=500mbit")
        link_rate_bps(rate)
        out[str(int(index))] = rate
    return out


def check_host(name: str, nodes: int, ranks_per_node: int, link: str, subnet: str) -> None:
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
    for dev in [f"cb{name}br", *(f"cb{name}{i}{end}" for i in range(nodes) for end in "hn")]:
        if _exists_link(dev):
            raise UsageError(f"--name {name}: network interface {dev} already exists")
    listing = subprocess.run(["ip", "-o", "-4", "addr"], check=False, capture_output=True, text=True).stdout
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) >= 4 and ipaddress.ip_interface(fields[3]).ip in net:
            raise UsageError(f"--subnet {subnet}: already in use on interface {fields[1]} ({fields[3]})")
    for i in range(nodes):
        if _exists_netns(f"cb-{name}-{i}"):
            raise UsageError(f"--name {name}: network namespace cb-{name}-{i} already exists")


def up(name: str, nodes: int, ranks_per_node: int, link: str, subnet: str, timeout_s: float = 120.0,
       node_links: dict[str, str] | None = None, declared: bool = True, start_ray: bool = True,
       node_env: dict[str, dict[str, str]] | None = None) -> LabState:
    """The lab: its network and, unless `start_ray` is False, a Ray node in every namespace (without
    Ray, the namespaces are bare hosts for something else to start Ray on, such as `ray up`)."""
    check_host(name, nodes, ranks_per_node, link, subnet)
    os.makedirs(state_dir(name), exist_ok=True)
    st = LabState(name, nodes, ranks_per_node, link, subnet, state_dir(name), f"/tmp/cbl-{name}",
                  node_links=dict(node_links or {}), declared=declared,
                  node_env={str(k): dict(v) for k, v in (node_env or {}).items()})
    st.save()
    if declared:
        _declare(st)
    try:
        _build_network(st)
        if start_ray:
            _start_ray(st, timeout_s)
    except BaseException:
        down(st)
        raise
    return st


def _build_network(st: LabState) -> None:
    prefix = ipaddress.ip_network(st.subnet).prefixlen
    st.bridge = f"cb{st.name}br"
    st.save()
    _ip("link", "add", st.bridge, "type", "bridge")
    _ip("addr", "add", f"{st.head_ip}/{prefix}", "dev", st.bridge)
    _ip("link", "set", st.bridge, "up")
    for i in range(st.nodes):
        ns, host_end, node_end = f"cb-{st.name}-{i}", f"cb{st.name}{i}h", f"cb{st.name}{i}n"
        st.namespaces.append(ns)
        st.veths.append(host_end)
        st.save()
        _ip("netns", "add", ns)
        _ip("link", "add", host_end, "type", "veth", "peer", "name", node_end)
        _ip("link", "set", node_end, "netns", ns)
        _ip("link", "set", host_end, "master", st.bridge, "up")
        _ip("-n", ns, "addr", "add", f"{st.node_ip(i)}/{prefix}", "dev", node_end)
        _ip("-n", ns, "link", "set", node_end, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        _shape(st, i, st.link_of(i), "add")


def set_mtu(st: LabState, i: int, mtu: int) -> None:
    """Node i's interface at MTU `mtu` (a planted misconfiguration: doctor names the node)."""
    _run(["ip", "-n", st.namespaces[i], "link", "set", "dev", f"cb{st.name}{i}n", "mtu", str(mtu)])


def block_inbound(st: LabState, i: int) -> None:
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


def unblock(st: LabState, i: int) -> None:
    _run(["ip", "netns", "exec", st.namespaces[i], "iptables", "-F", "INPUT"])


def shape_link(st: LabState, i: int, rate: str) -> None:
    """Shape node i's link anew at `rate`, both ends (its veth on the bridge and its peer in the
    namespace), as `up` shaped them: a fault planted, or lifted, while the lab runs."""
    _shape(st, i, rate, "change")


def _shape(st: LabState, i: int, rate: str, verb: str) -> None:
    # tbf needs a bucket of at least one timer tick's worth of bytes to reach its rate.
    burst = max(128 * 1024, int(link_rate_bps(rate) / 8 / 100))
    tbf = ["root", "tbf", "rate", rate, "burst", str(burst), "latency", "50ms"]
    _run(["tc", "qdisc", verb, "dev", f"cb{st.name}{i}h", *tbf])
    _run(["ip", "netns", "exec", st.namespaces[i], "tc", "qdisc", verb, "dev", f"cb{st.name}{i}n", *tbf])


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
        raise LabError(f"the lab's Ray head did not open {st.address}; see {log}")
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
    problems = []
    raynodes.stop_sessions(st.sessions)
    for ns in st.namespaces:
        raynodes.kill_pids(netns_pids(ns), signal.SIGKILL)
    for ns in st.namespaces:
        if _exists_netns(ns) and subprocess.run(["ip", "netns", "del", ns], check=False,
                                                capture_output=True).returncode:
            problems.append(f"namespace {ns}")
    for dev in [*st.veths, st.bridge]:
        if dev and _exists_link(dev) and subprocess.run(["ip", "link", "del", dev], check=False,
                                                        capture_output=True).returncode:
            time.sleep(0.5)  # a veth whose peer's namespace was just deleted goes away by itself
            if _exists_link(dev):
                problems.append(f"link {dev}")
    shutil.rmtree(st.temp_dir, ignore_errors=True)
    if not problems:
        shutil.rmtree(st.state_dir, ignore_errors=True)
    return problems


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


def _exists_netns(ns: str) -> bool:
    return os.path.exists(f"/run/netns/{ns}")


def _exists_link(dev: str) -> bool:
    return os.path.exists(f"/sys/class/net/{dev}")


def _ip(*args: str) -> None:
    _run(["ip", *args])


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if proc.returncode:
        raise LabError(f"`{' '.join(cmd)}` failed: {proc.stderr.strip() or proc.returncode}")


def _python() -> str:
    import sys

    return sys.executable


def run_command(st: LabState) -> str:
    return (
        f"RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH={st.auth_env()['RAY_AUTH_TOKEN_PATH']} collbench run --address {st.address} --ranks-per-node {st.ranks_per_node} "
        f"--patterns intra,inter,mixed,pairwise"
    )
