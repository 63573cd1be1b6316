"""A row's transport class: the kind of link its collective crossed, as the expected catalogue keys
its floors (NVIDIA's tracker: floors hold per transport class, not per GPU count). From the row's
topology and the paths NCCL's log named (execution.transport), and for NCCL's "IB" transport, which
covers InfiniBand and RoCE alike, the nodes' RDMA link layer from doctor's facts. Pure.

- intra: NVLS (NVLink SHARP) where NCCL connected it, NVLink (P2P/NVL), PCIe (P2P over PIX, PXB,
  PHB or SYS), SHM (host memory), or the network's class where a node's ranks went through it (NET);
- intra-domain (the nodes of one NVLink domain, an NVL72 rack): MNNVL;
- inter, mixed: IB, RoCE, EFA (AWS Libfabric) or TCP (NCCL's sockets, gloo);
- None where the rows do not say (an import, a run without NCCL's log); an intra row without it is
  compared with NVLink entries and the table says "assumed" (ASSUMED).
"""

from __future__ import annotations

CLASSES = ("NVLS", "NVLink", "PCIe", "SHM", "MNNVL", "IB", "RoCE", "EFA", "TCP")
ASSUMED = {"intra": "NVLink"}  # the class an entry may be compared as where a row's transport is unknown
WITHIN = {"NVLink": ("NVLS",)}  # NVLS runs over NVLink: an NVLink floor holds for a communicator that has it


def matches(entry_class: str | None, row_class: str | None, topology: str) -> bool:
    """Whether an entry of `entry_class` judges a row of `row_class` (None: either unknown)."""
    if entry_class is None:
        return True
    row = row_class or ASSUMED.get(topology)
    return row == entry_class or row in WITHIN.get(entry_class, ())


def fabric_of(facts: dict[str, dict] | None) -> str | None:
    """RoCE, IB or EFA: the RDMA NICs doctor read on the run's nodes (the most common kind), or None."""
    kinds: dict[str, int] = {}
    for node in (facts or {}).values():
        for dev in node.get("rdma") or ():
            kind = dev.get("kind") if isinstance(dev, dict) else None
            if kind:
                kinds[kind] = kinds.get(kind, 0) + 1
    return max(kinds, key=kinds.get) if kinds else None


def of(topology: str, intra: str | None, net: str | None, fabric: str | None = None) -> str | None:
    """The row's class, or None where its transport columns are empty."""
    intra, net = intra or "", net or ""
    if topology == "intra-domain":
        return "MNNVL"
    if topology == "intra" and intra:
        if "NVLS" in intra:
            return "NVLS"
        if "P2P/NVL" in intra or "P2P/NVB" in intra:  # NVB: NVLink through another GPU
            return "NVLink"
        if "P2P" in intra:
            return "PCIe"
        if "NET" not in intra:
            return "SHM" if "SHM" in intra else None
    if not net:
        return None
    low = net.lower()
    if low.startswith("gloo/tcp") or low.startswith("socket"):
        return "TCP"
    if "libfabric" in low or "efa" in low:
        return "EFA"
    if low.startswith("ib"):  # NCCL's log names RoCE devices (execution.transport: "IB/RoCE"); else doctor's facts
        return "RoCE" if "/roce" in low or fabric == "RoCE" else "IB"
    return None
