"""The odd node out: facts every GPU node of a fleet should share (GPU count and model, RDMA NICs and
their rates, CUDA, kernel, NIC firmware), each against the majority, naming the node and its value;
and nodes of one multi-node NVLink fabric (a ClusterUUID) whose clique differs from the others'.
A node with 7 GPUs among 8s, or one NIC fewer, is a node to drain before a job meets it (NVIDIA's
readiness tooling checks the GPU count against the fleet's majority for this reason). Nodes without
GPUs (a CPU head) are left out of the GPU and NIC comparisons.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from orchestrator.doctor.checks import FAIL, WARN, Check, CheckStatus, alike
from orchestrator.doctor.facts import NodeFacts


def _gpu_node(read: Callable[[NodeFacts], object]) -> Callable[[NodeFacts], object]:
    return lambda n: read(n) if n.gpus else None


def _rates(n: NodeFacts) -> str | None:
    rates = Counter(p.rate_gbps for d in n.rdma for p in d.ports if p.rate_gbps)
    return ", ".join(f"{k}x {r:g} Gb/s" for r, k in sorted(rates.items())) or None


# (check, words, the fact, severity, what to do)
FLEET: tuple[tuple[str, str, Callable[[NodeFacts], object], CheckStatus, str], ...] = (
    ("same GPU count", "GPUs", _gpu_node(lambda n: len(n.gpus)), FAIL,
     "a GPU fell off the bus or is hidden (nvidia-smi -q; dmesg for Xid 79): drain the node until it is back"),
    ("same GPU model", "GPU model", _gpu_node(lambda n: ", ".join(sorted({g.name for g in n.gpus}))), WARN,
     "a group runs at its slowest member's speed: keep unlike GPUs in separate pools"),
    ("same RDMA NICs", "RDMA NICs", _gpu_node(lambda n: len(n.rdma)), FAIL,
     "a NIC missing or its driver not loaded (ibstat; lspci | grep -i -e mellanox -e infiniband): every ring "
     "through the node loses a rail"),
    ("same NIC rates", "RDMA ports at", _gpu_node(_rates), WARN,
     "a port trained down (cable, optic or switch port) caps every ring through it (ibstat)"),
    ("same CUDA", "CUDA", lambda n: n.torch_cuda, WARN, "install the same torch build (its CUDA) everywhere"),
    ("same kernel", "kernel", lambda n: n.platform.kernel if n.platform else None, WARN,
     "one image on every node: kernels differ in their RDMA, IOMMU and driver modules"),
    ("same NIC firmware", "NIC firmware", _gpu_node(lambda n: ", ".join(sorted({d.firmware for d in n.rdma
                                                                                  if d.firmware})) or None), WARN,
     "update the NICs' firmware alike (mlxfwmanager): firmware differences change RoCE and adaptive routing"),
)


def odd_ones_out(nodes: list[NodeFacts]) -> tuple[list[Check], dict[str, list[Check]]]:
    """Each FLEET fact against the majority: the cluster's checks, and each odd node's."""
    per_node: dict[str, list[Check]] = {n.ip: [] for n in nodes}
    gpus = any(n.gpus for n in nodes)
    cluster = [alike(name, words, {n.ip: read(n) for n in nodes}, severity, hint, per_node,
                     "not read on any node" if gpus else "no node with GPUs") for name, words, read, severity, hint
               in FLEET]
    return cluster + _cliques(nodes, per_node), per_node


def _cliques(nodes: list[NodeFacts], per_node: dict[str, list[Check]]) -> list[Check]:
    """Nodes that report one ClusterUUID share an NVLink fabric, and usually one clique (its
    partition); a node in another clique than the rest of its fabric's nodes is named."""
    fabrics: dict[str, dict[str, object]] = {}
    for n in nodes:
        for g in n.fabric:
            if g.cluster_uuid and set(g.cluster_uuid) - set("0-") and g.clique_id is not None:
                fabrics.setdefault(g.cluster_uuid.lower(), {})[n.ip] = g.clique_id
    hint = ("a node outside its rack's clique reaches the others over the network, not NVLink: check its fabric "
            "partition (nvidia-smi -q -d FABRIC; the NVLink switch's partition configuration)")
    return [alike("same NVLink clique", f"fabric {uuid[:8]}: clique", cliques, WARN, hint, per_node)
            for uuid, cliques in fabrics.items() if len(cliques) > 1]
