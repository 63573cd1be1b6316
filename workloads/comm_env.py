"""The communication environment of a worker: which variables shape it, and which network
interface the worker's node IP is on (from `ip -o -4 addr` output).

gloo and NCCL pick an interface from the hostname unless told; on hosts with several NICs or
inside network namespaces that guess is wrong, so each worker names the interface that holds
its node's IP (unless the user already set GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME).
"""

from __future__ import annotations

import os
import subprocess

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
    name of the interface whose IPv4 address is `ip`."""
    for line in ip_addr_output.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "inet" and fields[3].split("/")[0] == ip:
            return fields[1].split("@")[0]
    return None


def pin_interfaces(ip: str) -> str | None:
    """Set the interface variables the user left unset to the interface holding `ip`.

    Returns the interface name in use (the user's, if set), or None when it cannot be found.
    """
    user = next((os.environ[v] for v in IFNAME_VARS if os.environ.get(v)), None)
    try:
        listing = subprocess.run(
            ["ip", "-o", "-4", "addr"], capture_output=True, text=True, timeout=10, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return user
    ifname = interface_for_ip(ip, listing)
    if ifname:
        for var in IFNAME_VARS:
            os.environ.setdefault(var, ifname)
    return user or ifname
