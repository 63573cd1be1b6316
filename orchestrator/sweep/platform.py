"""What platform a node is, from what it shows: its GPUs (nvidia-smi), its NICs
(/sys/class/infiniband: InfiniBand, RoCE or EFA, and their rate), its instance type where the
firmware names it (/sys/class/dmi/id/product_name on AWS), and what a collbench lab declares
(COLLBENCH_PLATFORM, COLLBENCH_EXPECTED). Pure given a file tree, so recorded /sys trees test it;
no network call (cloud metadata services are not asked).

A platform is a set of tags that expected-value entries name (analysis/expected.yaml):
  GPU: h100-sxm, h100-pcie, h200-sxm, a100-sxm, a100-pcie, b200, ..., gpus-8, or cpu
  network: ib-ndr (400 Gb/s per NIC), ib-hdr (200), ib-edr (100), roce-400, ..., efa, with -xN
           for N NICs (ib-ndr-x8, efa-x32)
  instance: aws-p5, aws-p5e, aws-p4d, aws-p4de, ...
  lab: lab
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

_IB_NAMES = {400: "ndr", 200: "hdr", 100: "edr", 56: "fdr", 800: "xdr"}
_GPU_FAMILIES = ("GB300", "GB200", "B300", "B200", "B100", "H200", "H100", "H800", "H20", "A100", "A800", "L40S", "L4", "V100")


@dataclass(frozen=True)
class Nic:
    name: str
    kind: str  # IB, RoCE, EFA
    gbps: int | None


@dataclass(frozen=True)
class Platform:
    tags: tuple[str, ...]
    gpu_model: str | None = None
    gpus: int = 0
    nics: tuple[Nic, ...] = ()
    instance_type: str | None = None
    declared: tuple[dict, ...] = field(default=())  # expected-value entries a lab declares

    @property
    def key(self) -> str:
        """The `platform` column: the tags joined by '+', sorted."""
        return "+".join(sorted(self.tags))


def gpu_tag(name: str) -> str | None:
    """NVIDIA H100 80GB HBM3 -> h100-sxm; NVIDIA H100 PCIe -> h100-pcie; NVIDIA A100-SXM4-80GB -> a100-sxm."""
    upper = name.upper()
    family = next((f for f in _GPU_FAMILIES if re.search(rf"\b{f}\b|\b{f}-", upper)), None)
    if family is None:
        return None
    if family.startswith(("B", "GB")):
        return family.lower()
    if "PCIE" in upper:
        return f"{family.lower()}-pcie"
    if "NVL" in upper.replace("NVLINK", ""):
        return f"{family.lower()}-nvl"
    return f"{family.lower()}-sxm"


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def nics(root: str = "/") -> list[Nic]:
    """RDMA devices in /sys/class/infiniband: EFA by driver or name, else by link layer."""
    base = os.path.join(root, "sys/class/infiniband")
    out = []
    for dev in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        driver = os.path.basename(os.readlink(os.path.join(base, dev, "device/driver"))) \
            if os.path.islink(os.path.join(base, dev, "device/driver")) else ""
        layer = _read(os.path.join(base, dev, "ports/1/link_layer")) or ""
        rate = _read(os.path.join(base, dev, "ports/1/rate")) or ""
        m = re.match(r"(\d+)", rate)
        gbps = int(m.group(1)) if m else None
        if driver == "efa" or dev.startswith("efa"):
            kind = "EFA"
        elif layer == "Ethernet":
            kind = "RoCE"
        else:
            kind = "IB"
        out.append(Nic(dev, kind, gbps))
    return out


def detect(root: str = "/", env: dict[str, str] | None = None, nvidia_smi_names: list[str] | None = None) -> Platform:
    """The platform of the node whose file tree is `root` (and whose GPU names nvidia-smi gave)."""
    env = os.environ if env is None else env
    tags: list[str] = []
    names = nvidia_smi_names or []
    model = names[0] if names else None
    tag = gpu_tag(model) if model else None
    if names:
        tags += [t for t in (tag, f"gpus-{len(names)}") if t]
    else:
        tags.append("cpu")
    found = nics(root)
    for kind in ("IB", "RoCE", "EFA"):
        mine = [n for n in found if n.kind == kind]
        if not mine:
            continue
        speed = max((n.gbps or 0) for n in mine)
        name = "efa" if kind == "EFA" else f"ib-{_IB_NAMES.get(speed, speed)}" if kind == "IB" else f"roce-{speed}"
        tags += [name, f"{name}-x{len(mine)}"]
    product = _read(os.path.join(root, "sys/class/dmi/id/product_name")) or ""
    instance = product if re.fullmatch(r"[a-z]+\d+[a-z]*\.\d*x?large|[a-z]+\d+[a-z]*\.metal", product) else None
    if instance:
        tags.append("aws-" + instance.split(".")[0])
    declared: tuple[dict, ...] = ()
    if env.get("COLLBENCH_PLATFORM"):
        tags.append(env["COLLBENCH_PLATFORM"])
    if env.get("COLLBENCH_EXPECTED"):
        import yaml

        with open(env["COLLBENCH_EXPECTED"]) as f:
            data = yaml.safe_load(f) or {}
        declared = tuple(data.get("entries", data) if isinstance(data, dict) else data)
    return Platform(tuple(dict.fromkeys(tags)), model, len(names), tuple(found), instance, declared)
