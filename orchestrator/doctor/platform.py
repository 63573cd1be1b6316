"""The platform under the collectives, as one node shows it: the kernel, PCIe ACS on the bridges
(`lspci -vvv`'s ACSCtl), the IOMMU's mode (the GPUs' and NICs' IOMMU groups, else the kernel's
command line), IMEX channels (multi-node NVLink), a RoCE port's GIDs. Read through `root` and
`run` as doctor.facts reads (recorded trees and outputs in tests: tests/fixtures/doctor, with their
sources); judged in doctor.platform_checks.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

IMEX_CHANNELS = "dev/nvidia-caps-imex-channels"
_BDF = re.compile(r"(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")
_REDIRECT = ("ReqRedir", "CmpltRedir")  # ACS P2P request and completion redirect: up to the root complex
_TRANSLATED = ("DMA", "DMA-FQ")  # an IOMMU group's default domain that translates (identity: passthrough)


@dataclass(frozen=True)
class Platform:
    """What the node's kernel and PCIe fabric say (None: not read, and `unread` says why)."""

    kernel: str | None = None  # uname -r
    iommu: str | None = None  # off | passthrough | translated (None: not read)
    iommu_how: str = ""  # what it was read from
    acs_redirect: tuple[str, ...] | None = None  # devices whose ACSCtl redirects P2P (None: not read)
    acs_on_path: tuple[str, ...] | None = None  # those upstream of a GPU or NIC (None: the PCIe tree not read)
    acs_read: int = 0  # ACSCtl lines read
    imex_channels: int | None = None  # /dev/nvidia-caps-imex-channels/channel* (None: no such folder)
    unread: tuple[str, ...] = ()  # what could not be read, and why


def read(root: str, run: Callable[[list[str]], str], devices: list[str], gpus: bool) -> Platform:
    """The node's platform facts; `devices`: the GPUs' and RDMA NICs' PCI addresses (their IOMMU
    groups), `gpus`: whether to read what only matters with GPUs (ACS, IMEX channels)."""
    unread: list[str] = []
    iommu, how = _iommu(root, devices)
    acs, acs_read = (None, 0)
    if gpus:
        try:
            text = run(["lspci", "-vvv"])
            acs, acs_read = parse_acs(text)
            if not acs_read and "<access denied>" in text:
                acs = None
                unread.append("PCIe ACS: lspci needs root to read the bridges' extended capabilities")
        except FileNotFoundError:
            unread.append("PCIe ACS: lspci not installed (pciutils)")
        except (OSError, subprocess.SubprocessError) as e:
            unread.append(f"PCIe ACS: lspci: {str(e).splitlines()[0][:100] if str(e) else type(e).__name__}")
    channels = os.path.join(root, IMEX_CHANNELS)
    imex = sum(1 for name in os.listdir(channels) if name.startswith("channel")) if os.path.isdir(channels) else None
    on_path = None
    upstream = _upstream(root, devices)
    if acs is not None and upstream is not None:
        on_path = tuple(d for d in acs if _short(d) in upstream)
    kernel = read_text(root, "proc/sys/kernel/osrelease")
    return Platform(kernel, iommu, how, acs, on_path, acs_read, imex, tuple(unread))


def _short(bdf: str) -> str:
    """0000:15:01.0 -> 15:01.0 (lspci leaves out domain 0000)."""
    return bdf.lower()[5:] if bdf.count(":") == 2 and bdf.startswith("0000:") else bdf.lower()


def _upstream(root: str, devices: list[str]) -> set[str] | None:
    """Every PCI device on the way from the root complex to the GPUs and NICs (the path of each in
    /sys/devices, through /sys/bus/pci/devices/BDF); None where no device's path could be read."""
    seen: set[str] = set()
    for bdf in devices:
        link = os.path.join(root, "sys/bus/pci/devices", bdf)
        if os.path.islink(link):
            seen |= {_short(part) for part in os.path.realpath(link).split(os.sep) if _BDF.fullmatch(part)}
    return seen or None


def parse_acs(text: str) -> tuple[tuple[str, ...], int]:
    """`lspci -vvv`: (the devices whose ACSCtl has P2P request or completion redirect on, how many
    ACSCtl lines were read). A grep of the ACSCtl lines alone (no device headers) names them
    `ACSCtl #k`."""
    device, found, read_n = None, [], 0
    for line in text.splitlines():
        head = line.split(" ", 1)[0]
        if line[:1] not in (" ", "\t") and _BDF.fullmatch(head):
            device = head
            continue
        stripped = line.strip()
        if not stripped.startswith("ACSCtl:"):
            continue
        read_n += 1
        flags = {f[:-1]: f.endswith("+") for f in stripped.split()[1:] if f[-1:] in "+-"}
        if any(flags.get(name) for name in _REDIRECT):
            found.append(device or f"ACSCtl #{read_n}")
    return tuple(dict.fromkeys(found)), read_n


def _iommu(root: str, devices: list[str]) -> tuple[str | None, str]:
    """off, passthrough or translated: from the IOMMU groups of the GPUs and NICs (their default
    domain's type), else the kernel's command line; (None, "") where neither says."""
    groups = os.path.join(root, "sys/kernel/iommu_groups")
    if os.path.isdir(groups) and not os.listdir(groups):
        return "off", "no IOMMU group in /sys/kernel/iommu_groups"
    types = {t for t in (read_text(root, f"sys/bus/pci/devices/{d}/iommu_group/type") for d in devices) if t}
    if types:
        mode = "translated" if types & set(_TRANSLATED) else "passthrough" if types == {"identity"} else None
        return mode, f"IOMMU group type {', '.join(sorted(types))} of the GPUs and NICs" + (
            "" if mode else ": not a type doctor knows (identity, DMA, DMA-FQ)")
    cmdline = read_text(root, "proc/cmdline")
    if cmdline is None:
        return None, ""
    words = set(cmdline.split())
    if words & {"iommu=pt", "iommu.passthrough=1"}:
        return "passthrough", "iommu=pt on the kernel's command line"
    if words & {"intel_iommu=on", "amd_iommu=on", "iommu=force"}:
        return "translated", "the kernel's command line turns the IOMMU on without iommu=pt"
    return None, ""


def read_text(root: str, path: str) -> str | None:
    """A file of the tree at `root` (a node's "/", a recorded tree), stripped; None where unreadable."""
    try:
        with open(os.path.join(root, path.lstrip("/"))) as f:
            return f.read().strip()
    except OSError:
        return None


def read_gids(port_dir: str) -> tuple[str, ...] | None:
    """A port's non-zero GIDs (ports/N/gids/*; None without that folder): RoCE addresses a port by
    them; none, or only link-local (fe80::) ones, means its network interface has no IP address."""
    gids = os.path.join(port_dir, "gids")
    if not os.path.isdir(gids):
        return None
    out = []
    for name in sorted(os.listdir(gids), key=lambda x: int(x) if x.isdigit() else 0):
        value = read_text(gids, name) if name.isdigit() else None
        if value and set(value.replace(":", "")) != {"0"}:
            out.append(value)
    return tuple(out)
