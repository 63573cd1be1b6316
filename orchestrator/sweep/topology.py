"""The fabric's switch tree, as operators already describe it (issue 46): Slurm's topology.conf
(`SwitchName=leaf1 Nodes=gpu[001-032]`, `SwitchName=spine Switches=leaf[1-2]`, slurm.conf's
topology/tree plugin), or a YAML file of the same:

    switches:
      leaf1: {nodes: [gpu001, gpu002]}
      leaf2: {nodes: "gpu[003-004]"}
      spine: {switches: [leaf1, leaf2]}

A node is placed under its leaf (the switch that lists it); a switch under the switch that lists
it. Nodes are named as --nodes takes them: scheduler name, host name or IP address (`place`). A
file that does not parse, a node under two leaves, a switch in a loop, or a measured node the file
does not list is one line (UsageError). Pure."""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from dataclasses import dataclass

from orchestrator import yamlfile
from orchestrator.errors import UsageError

_BRACKET = re.compile(r"\[([^\[\]]*)\]")
MAX_NAMES = 1_000_000  # a host list longer than any fabric: a typo's range (gpu[0-99999999]) refused, not built


def expand_hostlist(text: str, where: str = "") -> list[str]:
    """Slurm's host list: `gpu[001-003,007],cpu1` -> gpu001, gpu002, gpu003, gpu007, cpu1 (ranges
    keep their zero padding; several bracket groups in one name are their product). The names are
    counted before any is made: a range too wide is refused at once, whatever its width."""
    names: list[str] = []
    for item in _split_top(",".join(text.split())):  # Slurm splits a host list at commas and spaces
        if not item:
            continue
        parts = _BRACKET.split(item)  # literal, inside, literal, inside, ..., literal
        if "[" in "".join(parts[::2]) or "]" in "".join(parts[::2]):
            raise UsageError(f"{where}{item!r}: not a Slurm host list (unbalanced brackets)")
        groups = [_range(p, item, where) for p in parts[1::2]]  # each bracket group: (range, zero-padded width)
        if len(names) + math.prod(sum(len(r) for r, _ in group) for group in groups) > MAX_NAMES:
            raise UsageError(f"{where}{item!r}: more than {MAX_NAMES:,} names (a range too wide?)")
        inside = [[str(i).zfill(width) for r, width in group for i in r] for group in groups]
        for combo in itertools.product(*inside):
            names.append("".join(lit + got for lit, got in zip(parts[::2], (*combo, ""))))
    return names


def _split_top(text: str) -> list[str]:
    """Split at the commas outside brackets."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [*out, cur]


def _range(inside: str, item: str, where: str) -> list[tuple[range, int]]:
    """Each piece inside one pair of brackets: its numbers (not yet made) and zero-padded width."""
    out = []
    for piece in inside.split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", piece.strip())
        if not m or (m.group(2) and int(m.group(2)) < int(m.group(1))):
            raise UsageError(f"{where}{item!r}: not a Slurm host list ({piece!r} is not a number or a rising range)")
        lo, hi = m.group(1), m.group(2) or m.group(1)
        out.append((range(int(lo), int(hi) + 1), len(lo) if lo.startswith("0") else 0))
    return out


@dataclass(frozen=True)
class Topology:
    """Switches and what hangs below each: a leaf lists nodes, a higher switch lists switches."""

    nodes: dict[str, tuple[str, ...]]  # switch -> the nodes it lists (a leaf)
    switches: dict[str, tuple[str, ...]]  # switch -> the switches it lists
    source: str
    complete: bool = True  # lists every node measured (a file); Slurm's own tree and node labels may leave some out

    def leaf_of(self) -> dict[str, str]:
        """Node name -> its leaf switch."""
        return {n: s for s, names in self.nodes.items() for n in names}

    def parent_of(self) -> dict[str, str]:
        """Switch -> the switch above it (roots have none)."""
        return {child: s for s, children in self.switches.items() for child in children}

    def to_json(self) -> dict:
        return {"source": self.source, "nodes": {s: list(n) for s, n in self.nodes.items()},
                "switches": {s: list(c) for s, c in self.switches.items()}}


def path(switch: str, parents: dict[str, str]) -> list[str]:
    """The switch and those above it, lowest first (`parents`: Topology.parent_of())."""
    up = [switch]
    while up[-1] in parents and len(up) <= len(parents):
        up.append(parents[up[-1]])
    return up


def below(switch: str, leaf_of: dict, parents: dict[str, str]) -> set:
    """The keys of `leaf_of` (node -> its leaf) below `switch`: under its leaf, or a switch above it."""
    return {n for n, leaf in leaf_of.items() if switch in path(leaf, parents)}


def parse_conf(text: str, source: str) -> Topology:
    """Slurm's topology.conf: one switch a line, `SwitchName=` with `Nodes=` and/or `Switches=`
    (keys in any case; `LinkSpeed` and the like read and left; `#` starts a comment)."""
    nodes: dict[str, tuple[str, ...]] = {}
    switches: dict[str, tuple[str, ...]] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{source}:{number}: "
        fields = {}
        for word in line.split():
            key, eq, value = word.partition("=")
            if not eq:
                raise UsageError(f"{where}{word!r} is not KEY=VALUE (a topology.conf line: SwitchName=S Nodes=...)")
            fields[key.lower()] = value
        name = fields.get("switchname")
        if not name:
            raise UsageError(f"{where}a line without SwitchName= (a topology.conf line: SwitchName=S Nodes=...)")
        _add(nodes, switches, name, fields.get("nodes"), fields.get("switches"), where)
    return _checked(Topology(nodes, switches, source))


def parse_yaml(data, source: str) -> Topology:
    """{switches: {NAME: {nodes: LIST or host list, switches: LIST or host list}}}."""
    table = data.get("switches") if isinstance(data, dict) else None
    if not isinstance(table, dict) or not table:
        raise UsageError(f"{source}: expected `switches:` mapping each switch to its nodes or switches")
    nodes: dict[str, tuple[str, ...]] = {}
    switches: dict[str, tuple[str, ...]] = {}
    for name, body in table.items():
        if not isinstance(body, dict) or not ({"nodes", "switches"} & set(body)) or set(body) - {"nodes", "switches"}:
            raise UsageError(f"{source}: switch {name!r}: expected `nodes:` and/or `switches:`")
        if any(v is None or v == [] for v in body.values()):
            raise UsageError(f"{source}: switch {name!r}: an empty `nodes:` or `switches:`")
        listed = {k: ",".join(map(str, v)) if isinstance(v, list) else str(v) for k, v in body.items()}
        _add(nodes, switches, str(name), listed.get("nodes"), listed.get("switches"), f"{source}: ")
    return _checked(Topology(nodes, switches, source))


def _add(nodes: dict, switches: dict, name: str, listed_nodes: str | None, listed_switches: str | None,
         where: str) -> None:
    if name in nodes or name in switches:
        raise UsageError(f"{where}switch {name} is described twice")
    if not listed_nodes and not listed_switches:
        raise UsageError(f"{where}switch {name} lists no Nodes= and no Switches=")
    if listed_nodes:
        nodes[name] = tuple(expand_hostlist(listed_nodes, where))
    if listed_switches:
        switches[name] = tuple(expand_hostlist(listed_switches, where))


def _checked(topo: Topology) -> Topology:
    """Refuse a node under two leaves, a switch listed by two parents or by none that exists, a loop."""
    seen: dict[str, str] = {}
    for switch, names in topo.nodes.items():
        for n in names:
            if n in seen and seen[n] != switch:
                raise UsageError(f"{topo.source}: node {n} is under two switches ({seen[n]} and {switch})")
            seen[n] = switch
    described = set(topo.nodes) | set(topo.switches)
    parents: dict[str, str] = {}
    for switch, children in topo.switches.items():
        for child in children:
            if child not in described:
                raise UsageError(f"{topo.source}: switch {switch} lists switch {child}, which no line describes")
            if child in parents:
                raise UsageError(f"{topo.source}: switch {child} is under two switches ({parents[child]} and {switch})")
            parents[child] = switch
    for start in sorted(described):  # a loop: walking up from a switch comes back to it
        at, steps = start, 0
        while at in parents:
            at, steps = parents[at], steps + 1
            if at == start or steps > len(described):
                raise UsageError(f"{topo.source}: switch {start} is its own ancestor (a loop)")
    return topo


SCONTROL = "scontrol show topology"  # the source of a tree read inside a Slurm job


def parse_scontrol(text: str, source: str = SCONTROL) -> Topology:
    """What `scontrol show topology` says inside a job (`SwitchName=leaf1 Level=0 LinkSpeed=1
    Nodes=slm[0-2]`; a higher switch lists its switches and every node below them, which is left:
    a node's leaf is the lowest switch that lists it)."""
    lines = []
    for line in text.splitlines():
        words = line.split()
        if any(w.startswith("Switches=") for w in words):
            words = [w for w in words if not w.startswith("Nodes=")]
        lines.append(" ".join(words))
    return dataclasses.replace(parse_conf("\n".join(lines), source), complete=False)


def pods_on(pods: dict) -> dict[str, list[str]]:
    """Kubernetes node name -> the IPs of the pods on it (`kubectl get pods -o json`; a Ray node is
    a pod: its IP is what collbench sees)."""
    on: dict[str, list[str]] = {}
    for pod in (pods or {}).get("items") or []:
        status = pod.get("status") or {}
        ips = [p.get("ip") for p in status.get("podIPs") or []] or [status.get("podIP")]
        mine = on.setdefault((pod.get("spec") or {}).get("nodeName") or "", [])
        mine += [ip for ip in ips if ip and ip not in mine]
    return on


def from_kubernetes(nodes: dict, pods: dict, labels: list[str], source: str) -> Topology:
    """The tree Kubernetes' node labels describe (`kubectl get nodes -o json`, `kubectl get pods -o
    json`): a node's value of `labels[0]` is its leaf (GKE's cloud.google.com/gce-topology-subblock,
    EKS's topology.k8s.aws/network-node-layer-3, ...), each further label the switch above it. A
    leaf lists its nodes' names and the IPs of the pods on them (a Ray node is a pod: its IP is
    what collbench sees). A node without the first label is under no leaf (judged without one)."""
    leaf_nodes: dict[str, list[str]] = {}
    parents: dict[str, set[str]] = {}
    node_leaf = {}
    level_of: dict[str, set[int]] = {}  # a label value -> the levels it names a switch at
    for item in (nodes or {}).get("items") or []:
        name = (item.get("metadata") or {}).get("name")
        values = [((item.get("metadata") or {}).get("labels") or {}).get(label) for label in labels]
        if not name or not values[0]:
            continue
        for level, value in enumerate(values):
            if value:
                level_of.setdefault(value, set()).add(level)
        node_leaf[name] = values[0]
        leaf_nodes.setdefault(values[0], []).append(name)
        for child, parent in zip(values, values[1:]):
            if child and parent:
                parents.setdefault(parent, set()).add(child)
    for node, ips in pods_on(pods).items():
        if leaf := node_leaf.get(node):
            leaf_nodes[leaf] += [ip for ip in ips if ip not in leaf_nodes[leaf]]
    if not leaf_nodes:
        raise UsageError(f"{source}: no node carries the label {labels[0]}")
    if twice := sorted(v for v, at in level_of.items() if len(at) > 1):
        raise UsageError(f"{source}: the value {twice[0]} names switches at two levels (labels {', '.join(labels)}): "
                         "give each level's switches their own names")
    return dataclasses.replace(_checked(Topology({k: tuple(v) for k, v in leaf_nodes.items()},
                                                 {k: tuple(sorted(v)) for k, v in parents.items()}, source)),
                               complete=False)


def read(path: str) -> Topology:
    """The file at `path`: YAML where it ends in .yaml or .yml, Slurm's topology.conf otherwise."""
    if path.endswith((".yaml", ".yml")):
        return parse_yaml(yamlfile.read(path, "--topology"), path)  # bounded in size and depth
    data = yamlfile.read_bytes(path, "--topology", "a topology file")
    try:
        text = data.decode()
    except UnicodeDecodeError as e:
        raise UsageError(f"--topology {path}: cannot read it ({e})") from None
    return parse_conf(text, path)


def place(topo: Topology, nodes: list[tuple[str, str | None, str | None]], strict: bool = True) -> dict[str, str]:
    """Each measured node's leaf: `nodes` as (IP, host name, scheduler name), matched by scheduler
    name, then host name (as given, then its first label), then IP; one the topology does not list
    is refused, named (`strict`), or left out of the answer."""
    leaf_of = topo.leaf_of()
    out = {}
    for ip, host, name in nodes:
        short = host.split(".")[0] if host else None
        leaf = next((leaf_of[k] for k in (name, host, short, ip) if k and k in leaf_of), None)
        if leaf is None and not strict:
            continue
        if leaf is None:
            shown = ", ".join(dict.fromkeys(k for k in (name, host, ip) if k))
            raise UsageError(f"--topology {topo.source}: node {shown} is under no switch of it")
        out[ip] = leaf
    return out
