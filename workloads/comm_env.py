"""The communication environment of a worker: which variables shape it, and which network
interface the worker's node IP is on.

gloo and NCCL pick an interface from the hostname unless told; on hosts with several NICs or
inside network namespaces that guess is wrong, so each worker names the interface that holds
its node's IP (unless the user already set GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME). NCCL reads
its variable as a list of prefixes (`eth0` also matches eth0.100 and eth01: NCCL's matchIfList,
src/misc/utils.cc, compares with strncmp) and `=eth0` as the exact name, so NCCL's pin is `=NAME`; gloo
takes one exact name. The interface is read from `ip -o -4 addr` and, where `ip` is missing (a
minimal container image), from the kernel itself: each interface of /sys/class/net asked for its
IPv4 address (SIOCGIFADDR), the primary address of each (a secondary one is `ip`'s to show).
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")

# Variables that shape communication: the only ones --env may set, recorded with every run.
COMM_ENV_PREFIXES = ("NCCL_", "GLOO_", "FI_", "UCX_", "CUDA_", "TORCH_")


# Where a node's name in its scheduler is: Slurm sets SLURMD_NODENAME in every job step (a `srun ...
# ray start` on that node, so Ray's workers inherit it); under Kubernetes the pod spec passes the
# node's name through the downward API (env COLLBENCH_NODE_NAME, fieldRef spec.nodeName)
SCHEDULER_NODE_VARS = ("SLURMD_NODENAME", "COLLBENCH_NODE_NAME")


def scheduler_node_name(environ) -> str | None:
    """The node's name as its scheduler knows it (the name an operator drains), or None."""
    return next((environ[v].strip() for v in SCHEDULER_NODE_VARS if environ.get(v, "").strip()), None)


def interface_for_ip(ip: str, ip_addr_output: str) -> str | None:
    """Parse lines like `2: eth0    inet 10.0.0.5/24 brd ... scope global eth0` and return the
    name of the interface whose IPv4 address is `ip` (`cblab0n@if8` is `cblab0n`)."""
    for line in ip_addr_output.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "inet" and fields[3].split("/")[0] == ip:
            return fields[1].split("@")[0]
    return None


SIOCGIFADDR = 0x8915  # linux/sockios.h: an interface's (primary) IPv4 address


def kernel_addresses(net_dir: str = "/sys/class/net") -> dict[str, str]:
    """Each interface of `net_dir` with its primary IPv4 address, asked of the kernel (no `ip`
    needed); interfaces without one are left out. OSError where the folder cannot be listed."""
    out = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for name in sorted(os.listdir(net_dir)):
            try:
                got = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:  # no IPv4 address (EADDRNOTAVAIL), or gone since the listing
                continue
            out[name] = socket.inet_ntoa(got[20:24])
    return out


@dataclass(frozen=True)
class Holder:
    """Which interface holds an address, and how that was read."""

    interface: str | None  # None: no interface holds it, or it could not be read (`readable`)
    readable: bool  # False: neither `ip` nor the kernel's interface list could be read
    how: str  # "ip", "kernel", or why neither could be read


def _ip_addr() -> str:
    return subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True, timeout=10, check=True).stdout


def interface_holding(ip: str, ip_addr: Callable[[], str] = _ip_addr,
                      kernel: Callable[[], dict[str, str]] = kernel_addresses) -> Holder:
    """The interface whose IPv4 address is `ip`: from `ip -o -4 addr` where it runs, else from the
    kernel (kernel_addresses)."""
    try:
        return Holder(interface_for_ip(ip, ip_addr()), True, "ip")
    except (OSError, subprocess.SubprocessError) as e:
        no_ip = f"`ip -o -4 addr`: {str(e).splitlines()[0][:120] if str(e) else type(e).__name__}"
    try:
        named = [name for name, address in kernel().items() if address == ip]
    except OSError as e:
        return Holder(None, False, f"{no_ip}; /sys/class/net: {e.strerror or type(e).__name__}")
    return Holder(named[0] if named else None, True, "kernel")


def socket_ifname_matches(value: str, interfaces: tuple[str, ...]) -> bool:
    """NCCL_SOCKET_IFNAME's rules: comma-separated prefixes; `=` exact names; `^` names to avoid
    (then any other interface matches)."""
    avoid = value.startswith("^")
    exact = value.lstrip("^").startswith("=")
    names = [x for x in value.lstrip("^").lstrip("=").split(",") if x]
    hit = [i for i in interfaces if any(i == x if exact else i.startswith(x) for x in names)]
    return bool([i for i in interfaces if i not in hit and i != "lo"]) if avoid else bool(hit)


def pins(ifname: str) -> dict[str, str]:
    """The variables that pin gloo and NCCL to exactly `ifname` (NCCL's `=`: not a prefix)."""
    return {"GLOO_SOCKET_IFNAME": ifname, "NCCL_SOCKET_IFNAME": f"={ifname}"}


def pin_interfaces(ip: str) -> str | None:
    """Set the interface variables the user left unset to the interface holding `ip`.

    Returns the interface name in use (the user's, if set), or None when it cannot be found.
    """
    user = next((os.environ[v] for v in IFNAME_VARS if os.environ.get(v)), None)
    ifname = interface_holding(ip).interface
    if ifname:
        for var, value in pins(ifname).items():
            os.environ.setdefault(var, value)
    return user or ifname
