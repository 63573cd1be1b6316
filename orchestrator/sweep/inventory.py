"""The cluster as the planner sees it: nodes, their addresses and how many ranks each holds.

Built from `ray.nodes()` (live clusters) or from a description such as `64x8` (planning only).
Node order is the rank order: by IP (numerically), then node id. A node's `nvlink_domain` is the
NVLink fabric it shares with other nodes (sweep.fabric; None where none is known, as on every
cluster without multi-node NVLink).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from orchestrator.errors import UsageError

# `plan --inventory`: a described cluster, planned in seconds (1024x16: 5 s, 1024 nodes pairwise: 25 s)
MAX_PLAN_NODES, MAX_PLAN_RANKS = 1024, 16384


@dataclass(frozen=True)
class Node:
    node_id: str
    ip: str
    hostname: str
    gpus: int
    ranks: int  # ranks placed on this node: its GPUs, or --ranks-per-node CPU ranks, or 0
    accelerator: str | None = None
    memory_bytes: int = 0  # host memory Ray may use on the node (0: unknown)
    nvlink_domain: str | None = None  # `cluster_uuid/clique_id` of its GPUs' fabric (sweep.fabric), else None


@dataclass(frozen=True)
class Inventory:
    nodes: tuple[Node, ...]  # only nodes that hold ranks, in rank order

    @property
    def use_gpus(self) -> bool:
        return any(n.gpus for n in self.nodes)

    @property
    def world_size(self) -> int:
        return sum(n.ranks for n in self.nodes)

    def first_rank(self) -> list[int]:
        """Global rank of local rank 0 of each node."""
        out, total = [], 0
        for node in self.nodes:
            out.append(total)
            total += node.ranks
        return out

    def to_json(self) -> list[dict]:
        return [n.__dict__ for n in self.nodes]

    def domains(self) -> dict[str, list[int]]:
        """NVLink domain -> the indices of its nodes, in rank order (empty without domain facts)."""
        out: dict[str, list[int]] = {}
        for i, node in enumerate(self.nodes):
            if node.nvlink_domain is not None:
                out.setdefault(node.nvlink_domain, []).append(i)
        return out


def with_domains(inv: Inventory, domains: dict[str, str | None]) -> Inventory:
    """`inv` with each node's NVLink domain (`domains`: node id -> domain, as the probe read it)."""
    return Inventory(tuple(replace(n, nvlink_domain=domains.get(n.node_id)) for n in inv.nodes))


def _ip_key(ip: str) -> tuple:
    try:
        return (0, int(ipaddress.ip_address(ip)))
    except ValueError:
        return (1, ip)


def order_nodes(nodes: list[Node]) -> tuple[Node, ...]:
    """Rank order: nodes by IP (numerically), then node id; nodes without ranks dropped."""
    kept = [n for n in nodes if n.ranks > 0]
    return tuple(sorted(kept, key=lambda n: (_ip_key(n.ip), n.node_id)))


def from_ray_nodes(ray_nodes: list[dict], ranks_per_node: int) -> Inventory:
    """Inventory from `ray.nodes()` output. Dead nodes are ignored. When any node has GPUs,
    every node gets one rank per GPU (a CPU-only head gets none); otherwise every node that
    advertises CPUs gets `ranks_per_node` CPU ranks (a head started with --num-cpus=0 gets none)."""
    alive = [n for n in ray_nodes if n.get("Alive")]
    any_gpu = any(n.get("Resources", {}).get("GPU", 0) >= 1 for n in alive)
    nodes = []
    for n in alive:
        resources = n.get("Resources", {})
        gpus = int(resources.get("GPU", 0))
        accelerator = next((k.split(":", 1)[1] for k in resources if k.startswith("accelerator_type:")), None)
        nodes.append(
            Node(
                node_id=n["NodeID"],
                ip=n["NodeManagerAddress"],
                hostname=n.get("NodeManagerHostname", ""),
                gpus=gpus,
                ranks=gpus if any_gpu else (ranks_per_node if resources.get("CPU", 0) > 0 else 0),
                accelerator=accelerator,
                memory_bytes=int(resources.get("memory", 0)),
            )
        )
    return Inventory(order_nodes(nodes))


def from_description(text: str) -> Inventory:
    """`64x8` -> 64 nodes of 8 GPUs each; `4x2cpu` -> 4 nodes of 2 CPU ranks each; `36x4/18` -> 36
    nodes of 4 GPUs in NVLink domains of 18 consecutive nodes (two NVL72 racks; the last domain
    may be smaller)."""
    m = re.fullmatch(r"([0-9]{1,9})x([0-9]{1,9})(cpu)?(?:/([0-9]{1,9}))?", text.strip().lower())
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1 or (m.group(4) is not None and int(m.group(4)) < 1):
        raise UsageError(f"--inventory {text[:80]!r}: expected NODESxRANKS, such as 64x8 or 4x2cpu, or "
                         "NODESxGPUS/DOMAIN for NVLink domains of DOMAIN nodes, such as 36x4/18")
    if m.group(3) and m.group(4):
        raise UsageError(f"--inventory {text}: NVLink domains (/{m.group(4)}) need GPU nodes, not cpu ranks")
    if int(m.group(1)) > MAX_PLAN_NODES or int(m.group(1)) * int(m.group(2)) > MAX_PLAN_RANKS:
        # every group is an object: 1e8 nodes exhausted the memory, 4096x1024cpu took 8 GB and 4 minutes
        raise UsageError(f"--inventory {text}: at most {MAX_PLAN_NODES} nodes and {MAX_PLAN_RANKS} ranks")
    n_nodes, ranks = int(m.group(1)), int(m.group(2))
    gpus = 0 if m.group(3) else ranks
    per_domain = int(m.group(4)) if m.group(4) else None
    nodes = [
        Node(f"node-{i:05d}", str(ipaddress.ip_address(0x0A000000 + i + 1)), f"node-{i:05d}", gpus, ranks,
             nvlink_domain=f"described/{i // per_domain}" if per_domain else None)
        for i in range(n_nodes)
    ]
    return Inventory(order_nodes(nodes))


def select(inv: Inventory, nodes: tuple[str, ...] = (), exclude: tuple[str, ...] = (),
           aliases: Mapping[str, set[str]] | None = None) -> Inventory:
    """The inventory's nodes named in `nodes` (all when empty) less those in `exclude`, each named
    by IP, host name or Ray node id, or by a scheduler's name whose other names (`aliases`:
    scheduler.aliases) are those; a name that matches no node is refused, naming the nodes."""
    def matches(node: Node, name: str) -> bool:
        return bool({name, *(aliases or {}).get(name, ())} & {node.ip, node.hostname, node.node_id})

    for flag, names in (("--nodes", nodes), ("--exclude", exclude)):
        for name in names:
            if not any(matches(n, name) for n in inv.nodes):
                known = ", ".join(f"{n.ip} ({n.hostname})" if n.hostname else n.ip for n in inv.nodes[:8])
                more = f" and {len(inv.nodes) - 8} more" if len(inv.nodes) > 8 else ""
                raise UsageError(f"{flag} {name}: not a node of the cluster that can hold a rank "
                                 f"(nodes: {known}{more})")
    kept = [n for n in inv.nodes if (not nodes or any(matches(n, x) for x in nodes))
            and not any(matches(n, x) for x in exclude)]
    if not kept:
        raise UsageError(f"--exclude {','.join(exclude)}: leaves no node to measure")
    return Inventory(tuple(kept))


def from_placement_group(ray_nodes: list[dict], bundles: list[tuple[str, dict]]) -> Inventory:
    """The nodes of a caller's placement group, one rank per bundle (`bundles`: each bundle's node
    id and resources, in bundle order); GPU bundles make GPU ranks. Rank order is the usual (by
    node), and within a node the bundles' order."""
    alive = {n["NodeID"]: n for n in ray_nodes if n.get("Alive")}
    per_node: dict[str, list[dict]] = {}
    for node_id, resources in bundles:
        per_node.setdefault(node_id, []).append(resources)
    nodes = []
    for node_id, held in per_node.items():
        n = alive.get(node_id)
        if n is None:
            raise UsageError(f"the placement group has a bundle on node {node_id}, which is not alive")
        gpus = sum(1 for r in held if r.get("GPU", 0) >= 1)
        if gpus and gpus != len(held):
            raise UsageError(f"the placement group mixes GPU and CPU bundles on node {n['NodeManagerAddress']}: "
                             "give every bundle a GPU, or none")
        resources = n.get("Resources", {})
        accelerator = next((k.split(":", 1)[1] for k in resources if k.startswith("accelerator_type:")), None)
        nodes.append(Node(node_id, n["NodeManagerAddress"], n.get("NodeManagerHostname", ""), gpus, len(held),
                          accelerator, int(resources.get("memory", 0))))
    return Inventory(order_nodes(nodes))

