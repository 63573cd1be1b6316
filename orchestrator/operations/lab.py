"""`collbench lab up|down|exec`: a multi-node Ray cluster on this machine (network namespaces joined
by a bridge, links shaped with tc), built by orchestrator.lab.cluster; its options checked here."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.errors import UsageError
from orchestrator.lab import cluster
from orchestrator.lab.cluster import LabError, LabState, run_command
from orchestrator.sweep.spec import MAX_RANKS_PER_NODE
from orchestrator.sweep.units import parse_duration

__all__ = ["LabError", "LabState", "LabUp", "down", "environment", "load", "run_command", "up"]

MAX_TIMEOUT_S = 3600.0  # --timeout: nodes join in seconds; an hour is already a hung lab


@dataclass(frozen=True, kw_only=True)
class LabUp:
    """A lab to build, checked when made (the host's own checks come when it is built)."""

    name: str = "lab"
    nodes: int = 2
    cpus_per_node: int = 2
    cpus_flag: str = "--cpus-per-node"  # the flag that gave cpus_per_node, named when it is refused
    link: str = "1gbit"
    node_links: tuple[str, ...] = ()
    """NODE=RATE: node NODE (0-based) with its own link rate."""
    subnet: str = "10.213.0.0/24"
    timeout: str | float = "2m"
    declared: bool = True
    leaves: int = 1
    """Leaf switches: the nodes in this many blocks, each block's bridge joined to the head's by its uplink."""
    uplink: str = ""
    """Each leaf's uplink rate ("": the sum of its nodes' links)."""
    leaf_links: tuple[str, ...] = ()
    """LEAF=RATE: leaf LEAF (0-based) with its own uplink rate."""

    def __post_init__(self) -> None:
        if not 1 <= self.leaves <= max(self.nodes, 1) or self.leaves > 10:
            raise UsageError(f"--leaves {self.leaves}: between 1 and the nodes ({self.nodes}), at most 10")
        if (self.uplink or self.leaf_links) and self.leaves < 2:
            raise UsageError(f"{'--uplink' if self.uplink else '--leaf-link'}: needs --leaves 2 or more "
                             "(one leaf is every node on the head's bridge: no uplink to shape)")
        if self.uplink:
            cluster.link_rate_bps(self.uplink, "--uplink")
        _pairs("--leaf-link", self.leaf_links, self.leaves, "leaf")
        parse_duration(self.timeout, "--timeout", MAX_TIMEOUT_S)
        if not 1 <= self.cpus_per_node <= MAX_RANKS_PER_NODE:
            raise UsageError(f"{self.cpus_flag} {self.cpus_per_node}: must be between 1 and {MAX_RANKS_PER_NODE}")
        _pairs("--node-link", self.node_links, self.nodes, "node")


def _pairs(flag: str, items: tuple[str, ...], count: int, what: str) -> None:
    """Each INDEX=RATE item names one of `count` (nodes or leaves) and a rate, else one line."""
    for item in items:
        try:
            cluster.parse_node_links([item], max(count, 1), flag, what)
        except UsageError as e:  # the rate's own check names --link
            if str(e).startswith(flag):
                raise
            raise UsageError(f"{flag} {item!r}: expected {what.upper()}=RATE with a rate such as 500mbit") from None


def up(options: LabUp) -> LabState:
    """Build the lab; LabError (after cleaning up) where it could not be built."""
    node_links = cluster.parse_node_links(list(options.node_links) or None, options.nodes)
    leaf_links = cluster.parse_node_links(list(options.leaf_links) or None, options.leaves, "--leaf-link", "leaf")
    return cluster.up(options.name, options.nodes, options.cpus_per_node, options.link, options.subnet,
                      parse_duration(options.timeout, "--timeout", MAX_TIMEOUT_S), node_links,
                      declared=options.declared, leaves=options.leaves, uplink=options.uplink, leaf_links=leaf_links)


def load(name: str) -> LabState:
    """The lab of that name that is up; UsageError where none is."""
    try:
        return cluster.load(name)
    except (OSError, ValueError):  # a name no lab can have: too long, a NUL
        raise UsageError(f"--name {name[:80]!r}: no lab of that name is up") from None


def down(state: LabState) -> list[str]:
    """Remove exactly what `up` created; what could not be removed."""
    return cluster.down(state)


def environment(state: LabState) -> dict[str, str]:
    """What a command needs to run against the lab: its address and token authentication."""
    return {**state.auth_env(), "RAY_ADDRESS": state.address}
