"""`collbench doctor`'s checks: pure functions of the facts every node reported (doctor.facts) and
of what Ray says it has. Each check is ok, warn or fail, with its evidence and what to do; a node
that differs from the others is named on its own checks, the cluster's checks list the values.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from enum import Enum

from orchestrator.doctor.facts import NodeFacts
from workloads.comm_env import IFNAME_VARS, socket_ifname_matches


class CheckStatus(str, Enum):
    """How a doctor check came out (its JSON `status`: the word)."""

    OK = "ok"
    SKIP = "skip"  # nothing to read (not a GPU node, a fact not read): said, judged neither way
    WARN = "warn"  # said, and a run goes on
    FAIL = "fail"  # a quick check that fails refuses the run

    def __str__(self) -> str:
        return self.value


OK, SKIP, WARN, FAIL = CheckStatus.OK, CheckStatus.SKIP, CheckStatus.WARN, CheckStatus.FAIL
SHM_MIN_BYTES = 1 << 30  # NCCL's SHM transport keeps buffers per peer pair in /dev/shm; docker's default is 64 MiB
SHM_FAIL_BYTES = 256 << 20
# clocks event (throttle) reasons, NVML's nvmlClocksEventReasons bits
_IDLE, _APP_CLOCKS, _SW_POWER, _HW_SLOW, _SYNC_BOOST, _SW_THERMAL, _HW_THERMAL, _HW_BRAKE, _DISPLAY = (
    0x1, 0x2, 0x4, 0x8, 0x10, 0x20, 0x40, 0x80, 0x100)
_EVENTS = {_SW_POWER: "SW power cap", _HW_SLOW: "HW slowdown", _SW_THERMAL: "SW thermal slowdown",
           _HW_THERMAL: "HW thermal slowdown", _HW_BRAKE: "HW power brake"}
_HW_EVENTS = _HW_SLOW | _HW_THERMAL | _HW_BRAKE
# EFA devices by instance type (AWS: p4d 4 cards, p5/p5e 32 EFA devices, p5en 16, trn1.32xlarge 8)
EFA_DEVICES = {"p4d.24xlarge": 4, "p4de.24xlarge": 4, "p5.48xlarge": 32, "p5e.48xlarge": 32, "p5en.48xlarge": 16,
               "trn1.32xlarge": 8, "trn1n.32xlarge": 16}
SOFTWARE = (("python", FAIL), ("collbench", FAIL), ("ray", FAIL), ("torch", FAIL), ("nccl", FAIL), ("driver", WARN))


@dataclass(frozen=True)
class Check:
    name: str
    status: CheckStatus
    detail: str
    hint: str = ""

    def __post_init__(self) -> None:  # "ok", "warn", "fail" (a recorded check) read as the enum
        object.__setattr__(self, "status", CheckStatus(self.status))

    def to_json(self) -> dict:
        return {**asdict(self), "status": self.status.value}


def worst(checks: list[Check]) -> CheckStatus:
    return FAIL if any(c.status == FAIL for c in checks) else WARN if any(c.status == WARN for c in checks) else OK


# -- the same everywhere ----------------------------------------------------------------------
def _majority(values: dict[str, object]) -> object:
    counts = Counter(v for v in values.values() if v is not None)
    return counts.most_common(1)[0][0] if counts else None


def alike(name: str, label: str, values: dict[str, object], severity: CheckStatus, hint: str,
          per_node: dict[str, list[Check]], unread: str = "not read on any node") -> Check:
    """One fact alike on every node (`values`: by IP, None where not read or not applicable): the
    cluster's check; each node whose value differs from the majority's gets its own in `per_node`."""
    known = {ip: v for ip, v in values.items() if v is not None}
    if len(set(known.values())) <= 1:
        where = "every node" if len(known) == len(values) else f"the {len(known)} node(s) it applies to"
        return (Check(name, OK, f"{label} {next(iter(known.values()))} on {where}") if known
                else Check(name, SKIP, f"{label}: {unread}"))
    usual = _majority(known)
    odd = sorted(ip for ip, v in known.items() if v != usual)
    for ip in odd:
        per_node[ip].append(Check(name, severity, f"{label} {known[ip]} where the others have {usual}", hint))
    return Check(name, severity, f"{label} {usual} on {len(known) - len(odd)} node(s); "
                 + "; ".join(f"{known[ip]} on {ip}" for ip in odd), hint)


def same_everywhere(nodes: list[NodeFacts]) -> tuple[list[Check], dict[str, list[Check]]]:
    """Software and the communication variables on every node: cluster checks, and by IP each node's that differ."""
    per_node: dict[str, list[Check]] = {n.ip: [] for n in nodes}
    cluster = [alike(f"same {key}", key, {n.ip: getattr(n, key) for n in nodes}, severity,
                     _SOFTWARE_HINT.get(key, "install the same version on every node"), per_node)
               for key, severity in SOFTWARE]
    # the interface variables name each node's own NIC (collbench pins them per node where unset;
    # NIC names differ between nodes): `interface` checks each node's value against its NICs instead
    names = sorted({k for n in nodes for k in n.env} - set(IFNAME_VARS))
    differ = []
    for name in names:
        values = {n.ip: n.env.get(name) for n in nodes}
        if len(set(values.values())) > 1:
            usual = Counter(values.values()).most_common(1)[0][0]
            odd = sorted(ip for ip, v in values.items() if v != usual)
            differ.append(name)
            for ip in odd:
                mine = values[ip] if values[ip] is not None else "(unset)"
                per_node[ip].append(Check("same variables", WARN, f"{name}={mine} "
                                          f"where the others have {usual if usual is not None else '(unset)'}",
                                          "NCCL reads these on every rank; set them alike on every node (or pass "
                                          "them with --env)"))
    cluster.append(Check("same variables", WARN if differ else OK,
                         f"differ between nodes: {', '.join(differ)}" if differ else
                         f"NCCL_*, FI_*, UCX_* alike on every node ({len(names)} set)"))
    return cluster, per_node


_SOFTWARE_HINT = {
    "nccl": "NCCL refuses, or hangs, between different builds: install the same torch (its NCCL) everywhere",
    "torch": "one torch build everywhere (the cluster files pin it: docs/deploy/cloud.md, GPU driver)",
    "driver": "the same NVIDIA driver on every node avoids differences in NCCL's paths and CUDA's behaviour",
    "collbench": "install the same collbench on every node (the wheel of this checkout)",
    "ray": "Ray refuses mixed versions in one cluster: install the same Ray everywhere",
}


def same_mtu(nodes: list[NodeFacts]) -> tuple[list[Check], dict[str, list[Check]]]:
    """The MTU of the interface the collectives use, alike on every node: a node at 1280 among
    1500s drops or fragments the big frames its peers send."""
    values = {n.ip: n.mtu for n in nodes if n.mtu is not None}
    per_node = {n.ip: [] for n in nodes}
    if len(set(values.values())) <= 1:
        shown = next(iter(values.values()), None)
        return [Check("same MTU", OK, f"MTU {shown} on every node") if shown
                else Check("same MTU", SKIP, "MTU not read on any node")], per_node
    usual = _majority(values)
    odd = sorted(ip for ip, v in values.items() if v != usual)
    for ip in odd:
        iface = next(n.interface for n in nodes if n.ip == ip)
        per_node[ip].append(Check("same MTU", FAIL, f"MTU {values[ip]} on {iface} where the others have {usual}",
                                  f"set the MTU of {iface} to {usual} (ip link set dev {iface} mtu {usual}) or the "
                                  "other nodes' to match"))
    return [Check("same MTU", FAIL, f"MTU {usual} on {len(values) - len(odd)} node(s); "
                  + "; ".join(f"{values[ip]} on {ip}" for ip in odd))], per_node


# -- one node ---------------------------------------------------------------------------------
def node_checks(n: NodeFacts, ray_gpus: int = 0) -> list[Check]:
    """What can be said of one node alone (`ray_gpus`: the GPUs Ray says the node has)."""
    out = [_interface(n), *_limits(n)]
    if n.gpus or ray_gpus:
        out.append(_gpu_count(n, ray_gpus))
    no_nvlink = bool(n.gpus) and all(g.nvlinks_active == 0 and g.nvlinks_inactive for g in n.gpus)
    for g in n.gpus:
        out += _gpu(g, len(n.gpus), no_nvlink)
    out += _rdma(n)
    if n.gpus and n.rdma:
        out += [_gpudirect(n), *_affinity(n)]
    if n.problems:
        out.append(Check("readable", WARN, "; ".join(n.problems), "the checks that needed these facts were skipped"))
    return out


def _interface(n: NodeFacts) -> Check:
    for var in reversed(IFNAME_VARS):  # NCCL's first
        value = n.env.get(var)
        if value and not socket_ifname_matches(value, n.interfaces):
            return Check("interface", FAIL, f"{var}={value} names no interface of the node ({', '.join(n.interfaces)})",
                         f"set {var} to the interface of the node's IP ({n.interface or '?'}) on every node")
    if n.interface is None and not n.interface_readable:
        return Check("interface", WARN, f"unreadable: which interface holds {n.ip} could not be read",
                     "install iproute2 (`ip`) on the node, or pin the interface: --env NCCL_SOCKET_IFNAME==NAME "
                     "--env GLOO_SOCKET_IFNAME=NAME")
    if n.interface is None:
        return Check("interface", WARN, f"no interface holds the node's address {n.ip}",
                     "the address Ray advertises should be one the node holds (ray start --node-ip-address)")
    return Check("interface", OK, f"{n.ip} on {n.interface}" + (f", MTU {n.mtu}" if n.mtu else ""))


def _limits(n: NodeFacts) -> list[Check]:
    out = []
    many_gpus = len(n.gpus) >= 2
    if n.shm_bytes is not None:
        size = _gib(n.shm_bytes)
        if many_gpus and n.shm_bytes < SHM_FAIL_BYTES:
            out.append(Check("/dev/shm", FAIL, f"/dev/shm is {size} with {len(n.gpus)} GPUs",
                             "NCCL's shared-memory transport fails or falls back: give the container "
                             "--shm-size=16g (or --ipc=host)"))
        elif many_gpus and n.shm_bytes < SHM_MIN_BYTES:
            out.append(Check("/dev/shm", WARN, f"/dev/shm is {size}", "--shm-size=16g (or --ipc=host) for NCCL"))
        else:
            out.append(Check("/dev/shm", OK, f"/dev/shm is {size}"))
    if n.rdma:
        if n.memlock_bytes is not None:
            out.append(Check("memlock", FAIL, f"ulimit -l is {n.memlock_bytes // 1024} KiB with {len(n.rdma)} RDMA "
                             "device(s)",
                             "RDMA needs to pin memory: ulimit -l unlimited (docker: --ulimit memlock=-1:-1)"))
        else:
            out.append(Check("memlock", OK, "ulimit -l unlimited"))
        if not n.dev_infiniband:
            out.append(Check("/dev/infiniband", FAIL, f"{len(n.rdma)} RDMA device(s) in /sys but no /dev/infiniband",
                             "give the container the devices (--device=/dev/infiniband or --privileged)"))
    return out


def _gpu_count(n: NodeFacts, ray_gpus: int) -> Check:
    if len(n.gpus) != ray_gpus:
        return Check("GPUs in Ray", FAIL, f"nvidia-smi lists {len(n.gpus)} GPU(s), Ray gives {ray_gpus}",
                     "start Ray on the node with every GPU (ray start --num-gpus, CUDA_VISIBLE_DEVICES of the raylet)")
    return Check("GPUs in Ray", OK, f"{ray_gpus} GPU(s), all in Ray")


def _gpu(g, gpus_on_node: int, no_nvlink_on_node: bool) -> list[Check]:
    """One GPU's checks (`no_nvlink_on_node`: every GPU of its node has links, none of them up)."""
    name = f"GPU {g.index}"
    out = []
    if g.mig == "Enabled":
        out.append(Check(f"{name} MIG", WARN, "MIG mode is on", "NCCL between MIG instances is not supported "
                         "across GPUs: nvidia-smi -i N -mig 0 for collective benchmarks"))
    if g.persistence == "Disabled":
        out.append(Check(f"{name} persistence", WARN, "persistence mode is off",
                         "every process pays the driver's start: nvidia-smi -pm 1 (or nvidia-persistenced)"))
    if g.ecc_uncorrected:
        out.append(Check(f"{name} ECC", FAIL, f"{g.ecc_uncorrected} volatile uncorrectable ECC error(s)",
                         "drain the node and reset the GPU; replace it if errors return"))
    if g.remapped_pending:
        out.append(Check(f"{name} row remap", FAIL, "row remapping pending", "reset the GPU (or reboot) to apply it"))
    if g.remap_failure:
        out.append(Check(f"{name} row remap", FAIL, "row remapping failed",
                         "the GPU has run out of spare rows: replace it"))
    if g.events:
        active = [label for bit, label in _EVENTS.items() if g.events & bit]
        if active:
            out.append(Check(f"{name} clocks", FAIL if g.events & _HW_EVENTS else WARN,
                             f"clocks held down: {', '.join(active)} (0x{g.events:x})",
                             "check cooling and power (nvidia-smi -q -d PERFORMANCE); a throttled GPU slows its "
                             "whole group"))
    if g.nvlinks_inactive and g.nvlinks_active == 0 and gpus_on_node == 1:
        # a lone NVLink GPU (a one-GPU VM of an SXM part): links without a peer never come up
        out.append(Check(f"{name} NVLink", OK, f"no NVLink peers ({g.nvlinks_inactive} link(s), all inactive: the "
                         "node's only GPU)"))
    elif g.nvlinks_inactive and no_nvlink_on_node:
        # no GPU of the node has a link up: not one bad link but no NVLink at all between them
        out.append(Check(f"{name} NVLink", WARN, f"no NVLink between this node's {gpus_on_node} GPUs (all "
                         f"{g.nvlinks_inactive} link(s) of every GPU inactive): NCCL goes over PCIe",
                         "on an NVSwitch board start the fabric manager (systemctl status nvidia-fabricmanager); a VM "
                         "may pass its GPUs through without their NVLinks"))
    elif g.nvlinks_inactive and g.nvlinks_active is not None:
        out.append(Check(f"{name} NVLink", FAIL, f"{g.nvlinks_inactive} NVLink link(s) inactive, "
                         f"{g.nvlinks_active} up", "reset the GPU or check the NVSwitch fabric (nvidia-smi nvlink -s; "
                         "fabric manager)"))
    width, max_width = g.pcie_width
    gen, max_gen = g.pcie_gen
    if width and max_width and width < max_width:
        out.append(Check(f"{name} PCIe", FAIL, f"link x{width} of x{max_width}",
                         "reseat the GPU or check the riser/slot: host-device copies and GPUDirect go at that width "
                         "(a VM that exposes its GPUs at that width by design has nothing to fix)"))
    elif gen and max_gen and gen < max_gen:
        idle = bool(g.events and g.events & _IDLE)
        out.append(Check(f"{name} PCIe", OK if idle else WARN, f"gen {gen} of {max_gen}" + (" (idle)" if idle else ""),
                         "GPUs lower the link's speed when idle; read it again under load" if idle else
                         "a link below its generation under load: check the slot and BIOS"))
    return out


def _rdma(n: NodeFacts) -> list[Check]:
    out = []
    for dev in n.rdma:
        down = [p for p in dev.ports if p.state and p.state.upper() != "ACTIVE"]
        if down:
            out.append(Check(f"{dev.name} port", FAIL, ", ".join(f"port {p.port} {p.state}" for p in down),
                             "check the cable and the switch port (ibstat); NCCL uses only active ports"))
        width, max_width = dev.pcie_width
        speed, max_speed = dev.pcie_speed
        if (width and max_width and width < max_width) or (speed and max_speed and speed < max_speed):
            out.append(Check(f"{dev.name} PCIe", FAIL, f"link x{width} at {speed} GT/s of x{max_width} at "
                             f"{max_speed} GT/s", "reseat the NIC or check the slot: its bandwidth is capped"))
    rates = {p.rate_gbps for d in n.rdma if d.kind != "EFA" for p in d.ports if p.rate_gbps}
    if len(rates) > 1:
        out.append(Check("RDMA rates", WARN, "ports at " + ", ".join(f"{r:g} Gb/s" for r in sorted(rates)),
                         "a port below its peers' rate (a cable or a switch port trained down) slows every ring "
                         "through it"))
    efa = [d for d in n.rdma if d.kind == "EFA"]
    want = EFA_DEVICES.get(n.instance_type or "")
    if want and len(efa) < want:
        out.append(Check("EFA devices", FAIL, f"{len(efa)} EFA device(s) on {n.instance_type}, which has {want}",
                         "attach every EFA interface at launch (cluster.yaml's NetworkInterfaces)"))
    if n.rdma and not [c for c in out if c.status != OK]:
        out.append(Check("RDMA", OK, f"{len(n.rdma)} device(s), every port active"))
    return out


def _gpudirect(n: NodeFacts) -> Check:
    if n.peermem or n.dmabuf:
        return Check("GPUDirect RDMA", OK, "nvidia_peermem loaded" if n.peermem else "dma-buf available")
    return Check("GPUDirect RDMA", WARN, "neither nvidia_peermem nor dma-buf: NCCL stages network traffic through "
                 "host memory (no GDRDMA in its log)", "modprobe nvidia_peermem, or the open kernel module on a "
                 "5.12+ kernel for dma-buf")


def _affinity(n: NodeFacts) -> list[Check]:
    nic_numa = {d.numa for d in n.rdma if d.numa is not None and d.numa >= 0}
    if not nic_numa:
        return []
    far = [g.index for g in n.gpus if g.numa is not None and g.numa >= 0 and g.numa not in nic_numa]
    if far:
        return [Check("GPU-NIC affinity", WARN, f"GPU(s) {','.join(map(str, far))} have no RDMA NIC on their NUMA "
                      "node", "traffic of those GPUs crosses the CPU interconnect (nvidia-smi topo -m shows SYS)")]
    return [Check("GPU-NIC affinity", OK, "every GPU has an RDMA NIC on its NUMA node")]


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"
