"""NVLink domains that span nodes (GB200/GB300 NVL72, "MNNVL"): which GPUs share one fabric.

`nvidia-smi -q` has a Fabric section per GPU (NVML's nvmlGpuFabricInfo): its registration State,
Status, CliqueId and ClusterUUID, and on newer drivers its Health. GPUs whose fabric registration
completed with success and that report the same (ClusterUUID, CliqueId) share one NVLink domain,
whichever node they sit in; a clique ID alone is not unique (NVIDIA/nccl#1301), and an HGX node's
NVSwitches report Completed with CliqueId 0 and an all-zero UUID, which is no domain across nodes
(meta-pytorch/torchcomms#1385). Pure: the text in, the facts out (tests/fixtures/nvidia_smi).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_GPU_HEADER = re.compile(r"GPU [0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.\d")
_ZERO_UUID = re.compile(r"[0-]+")
_UNKNOWN = ("N/A", "[N/A]", "Not Supported", "[Not Supported]", "")


@dataclass(frozen=True)
class GpuFabric:
    """One GPU's Fabric section, its values as printed (None where absent or N/A)."""

    bus_id: str | None  # the GPU header's bus id, None where the output had no header (a grep)
    state: str | None  # Not Started | In Progress | Completed | None (N/A: no fabric)
    status: str | None  # Success, or the error (Insufficient Resources, ...)
    clique_id: int | None
    cluster_uuid: str | None
    health: str | None = None  # Health > Summary (Healthy, Unhealthy, ...), newer drivers only

    @property
    def domain(self) -> str | None:
        """`cluster_uuid/clique_id` where the GPU is registered in a fabric across nodes, else None."""
        if self.state != "Completed" or self.status != "Success" or self.clique_id is None:
            return None
        if not self.cluster_uuid or _ZERO_UUID.fullmatch(self.cluster_uuid):
            return None
        return f"{self.cluster_uuid.lower()}/{self.clique_id}"


def parse_fabric(text: str) -> list[GpuFabric]:
    """Every Fabric section of `nvidia-smi -q` output, in order. Nesting is read from the
    indentation relative to the "Fabric" line, so a section cut out of its report (a grep, a
    pasted block) reads as the whole report does."""
    out: list[GpuFabric] = []
    header: str | None = None
    fields: dict[str, str] | None = None
    indent = 0
    section: list[tuple[int, str]] = []  # (indent, name) of sub-sections inside Fabric (Health)

    def close() -> None:
        if fields is not None:
            out.append(_gpu_fabric(header, fields))

    for raw in text.splitlines():
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        depth = len(raw) - len(raw.lstrip(" "))
        if fields is not None and (depth <= indent or stripped == "--"):
            close()
            fields = None
        if _GPU_HEADER.fullmatch(stripped):
            header = stripped.split(" ", 1)[1]
            continue
        if stripped == "Fabric":
            fields, indent, section = {}, depth, []
            continue
        if fields is None:
            continue
        key, sep, value = stripped.partition(" : ")
        while section and section[-1][0] >= depth:
            section.pop()
        if not sep:
            section.append((depth, stripped.rstrip(":")))
            continue
        fields[" > ".join([*(name for _, name in section), key.strip()])] = value.strip()
    close()
    return out


def _gpu_fabric(bus_id: str | None, f: dict[str, str]) -> GpuFabric:
    def get(key: str) -> str | None:
        value = f.get(key, "").strip()
        return None if value in _UNKNOWN else value

    clique = get("CliqueId")
    return GpuFabric(bus_id, get("State"), get("Status"), int(clique) if clique and clique.isdigit() else None,
                     get("ClusterUUID"), get("Health > Summary"))


def node_domain(gpus: Iterable[GpuFabric]) -> str | None:
    """The NVLink domain of a node: the one every GPU of it reports, else None (no GPU, a GPU
    outside any domain, or GPUs of two domains: nothing to group the node by)."""
    domains = {g.domain for g in gpus}
    return domains.pop() if len(domains) == 1 else None
