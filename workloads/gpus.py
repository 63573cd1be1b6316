"""A node's GPUs as the NVIDIA driver lists them, read without touching CUDA (a worker reads this
before its mask is set): each GPU's UUID and PCI bus location, from
/proc/driver/nvidia/gpus/BUS/information (NVIDIA's README, "Using the /proc File System
Interface"). Where Ray gives workers GPU UUIDs, their order by bus is nvidia-smi's numbering;
their order as strings is not (tests/fixtures/proc_nvidia_gpus)."""

from __future__ import annotations

import os

PROC_GPUS = "/proc/driver/nvidia/gpus"
MAX_INFO_BYTES = 64 * 1024  # a GPU's information file is a dozen short lines


def bus_of_uuids(root: str = PROC_GPUS) -> dict[str, str]:
    """GPU UUID -> its PCI bus location (`0000:62:00.0`, lower case) for every GPU the driver
    lists under `root`; {} where there is no NVIDIA driver or nothing can be read."""
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return {}
    out: dict[str, str] = {}
    for entry in entries:
        try:
            with open(os.path.join(root, entry, "information"), encoding="utf-8", errors="replace") as f:
                text = f.read(MAX_INFO_BYTES)
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        uuid = fields.get("GPU UUID", "").strip()
        if uuid.startswith("GPU-"):
            out[uuid] = (fields.get("Bus Location", "").strip() or entry).lower()
    return out
