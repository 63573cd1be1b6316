"""The cluster as the planner sees it: nodes, their addresses and how many ranks each holds.

Built from `ray.nodes()` (live clusters) or from a description such as `64x8` (planning only).
Node order is the rank order: by IP (numerically), then node id.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

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
    """`64x8` -> 64 nodes of 8 GPUs each; `4x2cpu` -> 4 nodes of 2 CPU ranks each."""
    m = re.fullmatch(r"([0-9]{1,9})x([0-9]{1,9})(cpu)?", text.strip().lower())
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise UsageError(f"--inventory {text[:80]!r}: expected NODESxRANKS, such as 64x8 or 4x2cpu")
    if int(m.group(1)) > MAX_PLAN_NODES or int(m.group(1)) * int(m.group(2)) > MAX_PLAN_RANKS:
        # every group is an object: 1e8 nodes exhausted the memory, 4096x1024cpu took 8 GB and 4 minutes
        raise UsageError(f"--inventory {text}: at most {MAX_PLAN_NODES} nodes and {MAX_PLAN_RANKS} ranks")
    n_nodes, ranks = int(m.group(1)), int(m.group(2))
    gpus = 0 if m.group(3) else ranks
    nodes = [
        Node(f"node-{i:05d}", str(ipaddress.ip_address(0x0A000000 + i + 1)), f"node-{i:05d}", gpus, ranks)
        for i in range(n_nodes)
    ]
    return Inventory(order_nodes(nodes))
