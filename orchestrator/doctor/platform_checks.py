"""doctor's checks of the platform under the collectives (doctor.platform reads it): PCIe ACS
redirecting peer-to-peer traffic, the IOMMU translating device DMA, RoCE ports without a GID, and
multi-node NVLink readiness (the fabric's registration, IMEX channels).

NCCL's troubleshooting guide ("PCI Access Control Services (ACS)", "IOMMU") names the first two as
usual causes of slow or hanging P2P and GPUDirect RDMA; on a 2x8 H100 cluster with 8x400G RoCE,
clearing them (and NCCL_IB_SPLIT_DATA_ON_QPS, doctor.settings) took all_reduce from 216 to 456 GB/s
(NVIDIA/nccl#2409).
"""

from __future__ import annotations

from orchestrator.doctor.checks import FAIL, OK, SKIP, WARN, Check
from orchestrator.doctor.facts import NodeFacts
from orchestrator.doctor.platform import IMEX_CHANNELS, Platform

NCCL_TROUBLESHOOTING = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html"


def checks(n: NodeFacts) -> list[Check]:
    """ACS and the IOMMU where a node's GPUs talk to each other or to NICs over PCIe; RoCE GIDs;
    multi-node NVLink readiness where the node's GPUs are in a fabric across nodes."""
    p = n.platform
    out: list[Check] = []
    pcie_p2p = bool(n.gpus) and (len(n.gpus) > 1 or bool(n.rdma))
    if p is not None and pcie_p2p:
        out += [_acs(p), _iommu_check(p)]
    out += _gids(n)
    out += _mnnvl(n)
    return out


def _acs(p: Platform) -> Check:
    if p.acs_redirect is None:
        why = next((u.split(": ", 1)[1] for u in p.unread if u.startswith("PCIe ACS")), "not read")
        return Check("PCIe ACS", SKIP, f"not read: {why}")
    judged = p.acs_redirect if p.acs_on_path is None else p.acs_on_path
    elsewhere = len(p.acs_redirect) - len(judged)
    if not judged:
        return Check("PCIe ACS", OK, f"no device redirects peer-to-peer traffic on the GPUs' and NICs' paths "
                     f"({p.acs_read} ACS control(s) read" + (f"; {elsewhere} device(s) off those paths do)"
                                                             if elsewhere else ")"))
    shown = ", ".join(judged[:4]) + (f" and {len(judged) - 4} more" if len(judged) > 4 else "")
    where = "the PCIe tree not read: any device" if p.acs_on_path is None else "on the GPUs' and NICs' paths"
    return Check("PCIe ACS", WARN, f"ACS redirects peer-to-peer traffic on {len(judged)} device(s) ({shown}; {where}): "
                 "GPU-to-GPU P2P and GPUDirect RDMA go up through the root complex, slower, or hang",
                 "disable ACS on those bridges (BIOS, or setpci -s BDF ECAP_ACS+0x6.w=0000 after each boot) unless "
                 f"the node is a VM whose passthrough needs it ({NCCL_TROUBLESHOOTING}#pci-access-control-services-acs;"
                 " NVIDIA/nccl#2409)")


def _iommu_check(p: Platform) -> Check:
    if p.iommu is None:
        return Check("IOMMU", SKIP, f"not judged: {p.iommu_how}" if p.iommu_how else
                     "not read: no IOMMU group type and nothing about it on the kernel's command line")
    if p.iommu != "translated":
        return Check("IOMMU", OK, f"{p.iommu} ({p.iommu_how})")
    return Check("IOMMU", WARN, f"the IOMMU translates the DMA of the GPUs and NICs ({p.iommu_how}): P2P and "
                 "GPUDirect RDMA pay a translation on every access, or are redirected",
                 f"boot with iommu=pt (with intel_iommu=on or amd_iommu=on where set) so device DMA passes "
                 f"untranslated ({NCCL_TROUBLESHOOTING}#iommu; NVIDIA/nccl#2409)")


def _gids(n: NodeFacts) -> list[Check]:
    out = []
    for dev in n.rdma:
        for port in dev.ports:
            if dev.kind != "RoCE" or port.gids is None or (port.state or "").upper() != "ACTIVE":
                continue
            routable = [g for g in port.gids if not g.lower().startswith("fe80:")]
            if not routable:
                out.append(Check(f"{dev.name} GID", FAIL, f"RoCE port {port.port} has "
                                 + ("only link-local GIDs" if port.gids else "no GID")
                                 + ": NCCL cannot address it over RoCEv2",
                                 "give the port's network interface an IP address (NCCL picks an IPv4 RoCEv2 GID; "
                                 "show_gids lists them; NCCL_IB_GID_INDEX pins one)"))
    return out


def _mnnvl(n: NodeFacts) -> list[Check]:
    """A GPU in an NVLink fabric (a Fabric State other than N/A) whose registration did not complete
    with success (an HGX node's NVSwitches report Completed/Success; a GB200 tray's failed
    registration, "Insufficient Resources", even with an all-zero ClusterUUID) fails; where the
    fabric spans nodes (a non-zero ClusterUUID: GB200/GB300 NVL72), so does a missing IMEX channel;
    either way NCCL's MNNVL falls back to the network, silently."""
    fabric = [g for g in n.fabric if g.state]
    across = [g for g in fabric if g.cluster_uuid and set(g.cluster_uuid) - set("0-")]
    out = []
    pending = [g for g in fabric if g.state != "Completed" or g.status != "Success"]
    if pending:
        said = sorted({f"State {g.state}, Status {g.status or '?'}" for g in pending})
        out.append(Check("NVLink fabric", FAIL, f"{len(pending)} of {len(fabric)} GPU(s) not registered in the NVLink "
                         f"fabric ({'; '.join(said)}): NCCL falls back to the network between the rack's nodes",
                         "check the fabric services (nvidia-imex, the NVLink switch trays' NMX, nvidia-fabricmanager) "
                         "and nvidia-smi -q -d FABRIC; reset the GPUs after a fabric change"))
    unhealthy = sorted({g.health for g in fabric if g.health and g.health != "Healthy"})
    if unhealthy and not pending:
        out.append(Check("NVLink fabric", WARN, f"fabric health {', '.join(unhealthy)}: bandwidth across the rack may "
                         "be degraded", "nvidia-smi -q -d FABRIC shows which part of the health is not healthy"))
    if across and (not n.platform or not n.platform.imex_channels):
        out.append(Check("IMEX channel", FAIL, f"no IMEX channel in /{IMEX_CHANNELS}: CUDA cannot share memory across "
                         "the NVLink fabric, and NCCL's MNNVL is off",
                         "start nvidia-imex and create channel 0 (nvidia-modprobe -i 0:1); in a container give it "
                         "/dev/nvidia-caps-imex-channels (Kubernetes: the NVIDIA DRA driver's ComputeDomain)"))
    if across and not out:
        out.append(Check("NVLink fabric", OK, f"{len(across)} GPU(s) registered across nodes (clique "
                         f"{', '.join(sorted({str(g.clique_id) for g in across}))}), "
                         f"{n.platform.imex_channels} IMEX channel(s)"))
    return out
