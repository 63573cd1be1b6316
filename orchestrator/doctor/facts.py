"""What `collbench doctor` reads on one node, in a short Ray task there: software versions, the
communication variables, the interface the collectives use and its MTU, container limits, and
where present the GPUs (nvidia-smi), NVLink, the RDMA NICs (/sys/class/infiniband) and their PCIe
links. Torch-free, and no device work: torch is asked in a subprocess, as the probe does.

Everything is read through `root` (a file tree: "/" on a node, a recorded /sys tree in tests) and
`run` (a command runner: the real one on a node, recorded outputs in tests), so each parser is
tested on what real machines printed (tests/fixtures/doctor, with their sources).
"""

from __future__ import annotations

import json
import os
import re
import resource
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from orchestrator.doctor import platform as pf
from orchestrator.sweep.fabric import GpuFabric, parse_fabric
from workloads.comm_env import COMM_ENV_PREFIXES, interface_holding, kernel_addresses

Run = Callable[[list[str]], str]  # stdout of a command; raises OSError/CalledProcessError/TimeoutExpired

# Every prefix a run records (workloads.comm_env), less what Ray sets per worker
COMM_PREFIXES = COMM_ENV_PREFIXES
PER_WORKER = ("CUDA_VISIBLE_DEVICES",)

@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    bus_id: str
    persistence: str | None = None  # Enabled | Disabled
    mig: str | None = None  # Enabled | Disabled | None (a GPU without MIG: [N/A])
    ecc_uncorrected: int | None = None  # volatile uncorrectable errors since the driver loaded
    remapped_pending: int | None = None  # row remaps waiting for a GPU reset (A100 and newer)
    remap_failure: bool | None = None
    events: int | None = None  # the clocks event (throttle) reasons bitmask
    pcie_gen: tuple[int | None, int | None] = (None, None)  # current, max
    pcie_width: tuple[int | None, int | None] = (None, None)
    numa: int | None = None
    nvlinks_active: int | None = None
    nvlinks_inactive: int | None = None


@dataclass(frozen=True)
class Port:
    port: int
    state: str | None  # ACTIVE, DOWN, INIT, ARMED (from "4: ACTIVE")
    rate_gbps: float | None
    link_layer: str | None  # InfiniBand | Ethernet
    gids: tuple[str, ...] | None = None  # RoCE: its non-zero GIDs (platform.read_gids); None: not RoCE


@dataclass(frozen=True)
class Rdma:
    name: str
    kind: str  # IB | RoCE | EFA
    ports: tuple[Port, ...] = ()
    pcie_speed: tuple[float | None, float | None] = (None, None)  # current, max GT/s
    pcie_width: tuple[int | None, int | None] = (None, None)
    numa: int | None = None
    bus_id: str | None = None
    firmware: str | None = None  # fw_ver


@dataclass(frozen=True)
class NodeFacts:
    ip: str
    hostname: str = ""
    python: str | None = None
    collbench: str | None = None
    ray: str | None = None
    torch: str | None = None
    torch_cuda: str | None = None
    nccl: str | None = None  # the NCCL library torch loads (its runtime version)
    driver: str | None = None
    env: dict = field(default_factory=dict)  # NCCL_*, FI_*, UCX_* of Ray's processes on the node
    interface: str | None = None  # the one holding the node's IP: where sockets of the collectives go
    interface_readable: bool = True  # False: neither `ip` nor the kernel said which interface holds it
    mtu: int | None = None
    interfaces: tuple[str, ...] = ()
    shm_bytes: int | None = None
    memlock_bytes: int | None = None  # None: unlimited
    dev_infiniband: bool = False
    gpus: tuple[Gpu, ...] = ()
    rdma: tuple[Rdma, ...] = ()
    peermem: bool | None = None  # nvidia_peermem loaded (GPUDirect RDMA through peer memory)
    dmabuf: bool | None = None  # kernel and driver offer dma-buf (GPUDirect RDMA without peermem)
    instance_type: str | None = None
    fabric: tuple[GpuFabric, ...] = ()  # each GPU's NVLink fabric registration (sweep.fabric)
    platform: pf.Platform | None = None  # kernel, ACS, IOMMU, IMEX channels (doctor.platform)
    problems: tuple[str, ...] = ()  # what could not be read, and why

    def to_json(self) -> dict:
        return asdict(self)


def _run(cmd: list[str]) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=True).stdout


_read = pf.read_text  # one reader of a node's files (doctor.platform)


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    m = re.match(r"\s*(-?\d+)", text)
    return int(m.group(1)) if m else None


def gather(ip: str, root: str = "/", run: Run = _run, env: dict | None = None, gpus: bool = True) -> NodeFacts:
    """The node's facts; a part that cannot be read is left empty and named in `problems`."""
    env = dict(os.environ if env is None else env)
    problems: list[str] = []
    facts: dict = {"ip": ip, "hostname": socket.gethostname(), "python": sys.version.split()[0],
                   "env": {k: v for k, v in sorted(env.items()) if k.startswith(COMM_PREFIXES) and k not in PER_WORKER}}
    facts.update(_software(run, problems))
    facts.update(interface_facts(ip, root, run, problems))
    facts.update(limits(root))
    if gpus:
        facts.update(gpu_facts(root, run, problems))
    facts["rdma"] = tuple(rdma_devices(root))
    facts["instance_type"] = _instance(root)
    facts["platform"] = pf.read(root, run, [_sysfs_bus(g.bus_id) for g in facts.get("gpus", ())]
                                      + [d.bus_id for d in facts["rdma"] if d.bus_id], bool(facts.get("gpus")))
    facts["problems"] = tuple(problems) + facts["platform"].unread
    return NodeFacts(**facts)


_SOFTWARE = """
import json, sys
out = {}
try:
    import orchestrator; out["collbench"] = orchestrator.__version__
except Exception: pass
try:
    import ray; out["ray"] = ray.__version__
except Exception: pass
try:
    import torch
    out["torch"], out["torch_cuda"] = torch.__version__, torch.version.cuda
    if torch.version.cuda:
        out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
except Exception as e:
    out["error"] = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
print(json.dumps(out))
"""


def _software(run: Run, problems: list[str]) -> dict:
    """Versions as the node's Python sees them (in a subprocess: torch's import and its NCCL
    library stay out of the task's process)."""
    try:
        got = json.loads(run([sys.executable, "-c", _SOFTWARE]).strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as e:
        problems.append(f"software versions: {str(e).splitlines()[0][:120] if str(e) else type(e).__name__}")
        return {}
    if got.get("error"):
        problems.append(f"torch: {got['error']}")
    return {k: got.get(k) for k in ("collbench", "ray", "torch", "torch_cuda", "nccl")}


def interface_facts(ip: str, root: str, run: Run, problems: list[str]) -> dict:
    """The interface holding `ip` (where NCCL's and gloo's sockets go), its MTU, every interface:
    from `ip`, else from the kernel (only on the node itself, `root` "/"); where neither can be
    read, `interface_readable` is False and the reason is a problem."""
    net = os.path.join(root, "sys/class/net")
    names = tuple(sorted(os.listdir(net))) if os.path.isdir(net) else ()

    def kernel() -> dict[str, str]:
        if os.path.abspath(root) != "/":
            raise OSError(0, "a recorded tree, not this node's kernel")
        return kernel_addresses(net)

    holder = interface_holding(ip, lambda: run(["ip", "-o", "-4", "addr", "show"]), kernel)
    if not holder.readable:
        problems.append(f"interface: {holder.how}")
    mtu = _int(_read(root, f"sys/class/net/{holder.interface}/mtu")) if holder.interface else None
    return {"interface": holder.interface, "interface_readable": holder.readable, "mtu": mtu, "interfaces": names}


def limits(root: str) -> dict:
    """/dev/shm's size (NCCL's shared-memory transport needs room per peer), memlock (RDMA
    registration), and whether /dev/infiniband is visible (a container given the host's NICs)."""
    shm = None
    try:
        st = os.statvfs(os.path.join(root, "dev/shm"))
        shm = st.f_frsize * st.f_blocks
    except OSError:
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return {"shm_bytes": shm, "memlock_bytes": None if soft == resource.RLIM_INFINITY else soft,
            "dev_infiniband": os.path.isdir(os.path.join(root, "dev/infiniband"))}


def gpu_facts(root: str, run: Run, problems: list[str]) -> dict:
    """The GPUs as `nvidia-smi -q` shows them (one call, every fact; its labels changed across
    drivers, which parse_smi_q follows), their NVLink links, GPUDirect RDMA's kernel pieces."""
    try:
        text = run(["nvidia-smi", "-q"])
    except FileNotFoundError:  # no nvidia-smi: not a GPU node
        return {}
    except (OSError, subprocess.SubprocessError) as e:
        problems.append(f"nvidia-smi: {str(e).splitlines()[0][:120] if str(e) else type(e).__name__}")
        return {}
    driver, gpus = parse_smi_q(text)
    try:
        links = parse_nvlink_status(run(["nvidia-smi", "nvlink", "--status"]))
    except (OSError, subprocess.SubprocessError):
        links = {}
    out_gpus = []
    for g in gpus:
        active, inactive = links.get(g.index, (None, None))
        numa = _int(_read(root, f"sys/bus/pci/devices/{_sysfs_bus(g.bus_id)}/numa_node"))
        out_gpus.append(Gpu(**{**asdict(g), "nvlinks_active": active, "nvlinks_inactive": inactive, "numa": numa}))
    peermem = os.path.isdir(os.path.join(root, "sys/module/nvidia_peermem"))
    return {"gpus": tuple(out_gpus), "driver": driver, "peermem": peermem, "dmabuf": _dmabuf(root),
            "fabric": tuple(parse_fabric(text))}


def _tree(text: str) -> list[tuple[tuple[str, ...], str]]:
    """`nvidia-smi -q` as (path of section names, value) per `Name : value` line, the path from
    the indentation (four spaces a level; a line without ':' opens a section)."""
    out, stack = [], []
    for raw in text.splitlines():
        if not raw.strip() or raw.startswith(("=", "#", "$ ")):  # banners, comments, a shell's prompt
            continue
        depth = (len(raw) - len(raw.lstrip(" "))) // 4
        key, sep, value = raw.strip().partition(" : ") if " : " in raw else (raw.strip().rstrip(":"), "", "")
        key = key.strip()
        del stack[depth:]
        if sep:
            out.append((tuple(stack) + (key,), value.strip()))
        else:
            stack.append(key)
    return out


# clocks event (throttle) reasons: nvidia-smi's labels, NVML's bits
EVENT_BITS = {"Idle": 0x1, "Applications Clocks Setting": 0x2, "SW Power Cap": 0x4, "HW Slowdown": 0x8,
              "Sync Boost": 0x10, "SW Thermal Slowdown": 0x20, "HW Thermal Slowdown": 0x40,
              "HW Power Brake Slowdown": 0x80, "Display Clock Setting": 0x100}


def parse_smi_q(text: str) -> tuple[str | None, list[Gpu]]:
    """(driver version, every GPU) from `nvidia-smi -q`. Labels of both eras: "Clocks Throttle
    Reasons" (before 535) and "Clocks Event Reasons"; ECC errors as "Double Bit ... Total" (old) or
    "SRAM/DRAM Uncorrectable" (new); counters kept apart from the current reasons."""
    driver, gpus, current, fields, headless = None, [], None, {}, {}

    def close() -> None:
        if current is not None:
            gpus.append(_gpu_of(len(gpus), current, fields))

    for path, value in _tree(text):
        if path == ("Driver Version",):
            driver = value
        head = path[0]
        if re.fullmatch(r"GPU [0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.\d", head):
            if head != current:
                close()
                current, fields = head, {}
            fields[path[1:]] = value
        elif current is None:  # sections of one GPU without its header (`nvidia-smi -q -i 0 -d ...` cut short)
            headless[path] = value
    close()
    if not gpus and any(p[0].startswith("Clocks") or p[0] in ("PCI", "ECC Errors", "Remapped Rows") for p in headless):
        gpus.append(_gpu_of(0, "GPU unknown", headless))
    return driver, gpus


def _gpu_of(index: int, header: str, f: dict[tuple[str, ...], str]) -> Gpu:
    def get(*path: str) -> str | None:
        return _na(f.get(path, ""))

    volatile = [v for path, v in f.items() if path[:2] == ("ECC Errors", "Volatile")
                and ("Uncorrectable" in path[-1] or path[-2:] == ("Double Bit", "Total"))]
    ecc = sum(_int(v) or 0 for v in volatile if _na(v)) if any(_na(v) for v in volatile) else None
    events = 0
    seen = False
    for section in ("Clocks Event Reasons", "Clocks Throttle Reasons"):
        for path, v in f.items():
            if path[0] == section and len(path) >= 2 and path[-1] in EVENT_BITS:
                seen = True
                if v.strip() == "Active":
                    events |= EVENT_BITS[path[-1]]
    pending = get("Remapped Rows", "Pending")
    failure = get("Remapped Rows", "Remapping Failure Occurred")
    link = ("PCI", "GPU Link Info")
    return Gpu(index, get("Product Name") or "?", header.split(" ", 1)[1], get("Persistence Mode"),
               get("MIG Mode", "Current"), ecc,
               remapped_pending=None if pending is None else int(pending == "Yes"),
               remap_failure=None if failure is None else failure == "Yes", events=events if seen else None,
               pcie_gen=(_int(get(*link, "PCIe Generation", "Current")), _int(get(*link, "PCIe Generation", "Max"))),
               pcie_width=(_int(get(*link, "Link Width", "Current")), _int(get(*link, "Link Width", "Max"))))


def _na(text: str) -> str | None:
    text = text.strip()
    return None if text in ("[N/A]", "N/A", "[Not Supported]", "Not Supported", "") else text


def parse_nvlink_status(text: str) -> dict[int, tuple[int, int]]:
    """`nvidia-smi nvlink --status`: GPU index -> (links up, links inactive)."""
    out: dict[int, list[int]] = {}
    gpu = None
    for line in text.splitlines():
        m = re.match(r"GPU (\d+):", line.strip())
        if m:
            gpu = int(m.group(1))
            out.setdefault(gpu, [0, 0])  # `nvlink --capabilities` lists the GPUs again: not a reset
            continue
        m = re.match(r"\s*Link \d+:\s*(.*)", line)
        if m and gpu is not None:
            out[gpu][1 if "inactive" in m.group(1).lower() else 0] += 1
    return {g: (a, i) for g, (a, i) in out.items()}


def _bus(bus_id: str) -> str:
    """00000000:18:00.0 -> 18:00.0 (nvidia-smi pads the PCI domain to 8 digits, sysfs to 4)."""
    return bus_id.strip().lower().split(":", 1)[1] if bus_id.count(":") == 2 else bus_id.strip().lower()


def _sysfs_bus(bus_id: str) -> str:
    return "0000:" + _bus(bus_id)


def _dmabuf(root: str) -> bool | None:
    """dma-buf GPUDirect RDMA: a kernel with dma-buf (5.12+) shows /sys/kernel/dmabuf, and the
    open GPU kernel module (which exports it) names itself in /proc/driver/nvidia/version."""
    version = _read(root, "proc/driver/nvidia/version")
    if version is None:
        return None
    return os.path.isdir(os.path.join(root, "sys/kernel/dmabuf")) and "Open Kernel Module" in version


def rdma_devices(root: str = "/") -> list[Rdma]:
    """RDMA devices in /sys/class/infiniband with every port's state, rate and link layer, and
    the PCIe link of the device they sit on (EFA by its driver or name)."""
    base = os.path.join(root, "sys/class/infiniband")
    out = []
    for dev in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        where = f"sys/class/infiniband/{dev}"
        driver_link = os.path.join(base, dev, "device/driver")
        driver = os.path.basename(os.readlink(driver_link)) if os.path.islink(driver_link) else ""
        ports = []
        port_dir = os.path.join(base, dev, "ports")
        names = os.listdir(port_dir) if os.path.isdir(port_dir) else []
        for p in sorted(names, key=lambda x: int(x) if x.isdigit() else 0):
            state = _read(root, f"{where}/ports/{p}/state")
            rate = _read(root, f"{where}/ports/{p}/rate")
            m = re.match(r"([\d.]+)", rate or "")
            layer = _read(root, f"{where}/ports/{p}/link_layer")
            ports.append(Port(int(p) if p.isdigit() else 0, state.split(":")[-1].strip() if state else None,
                              float(m.group(1)) if m else None, layer,
                              pf.read_gids(os.path.join(port_dir, p)) if layer == "Ethernet" else None))
        layer = ports[0].link_layer if ports else None
        kind = "EFA" if driver == "efa" or dev.startswith("efa") else "RoCE" if layer == "Ethernet" else "IB"
        bus = os.path.basename(os.path.realpath(os.path.join(base, dev, "device"))) \
            if os.path.exists(os.path.join(base, dev, "device")) else None
        out.append(Rdma(dev, kind, tuple(ports),
                        (_gts(_read(root, f"{where}/device/current_link_speed")),
                         _gts(_read(root, f"{where}/device/max_link_speed"))),
                        (_int(_read(root, f"{where}/device/current_link_width")),
                         _int(_read(root, f"{where}/device/max_link_width"))),
                        _int(_read(root, f"{where}/device/numa_node")), bus, _read(root, f"{where}/fw_ver")))
    return out


def _gts(text: str | None) -> float | None:
    """`16.0 GT/s PCIe` -> 16.0."""
    m = re.match(r"\s*([\d.]+)\s*GT/s", text or "")
    return float(m.group(1)) if m else None


def _instance(root: str) -> str | None:
    product = _read(root, "sys/class/dmi/id/product_name") or ""
    return product if re.fullmatch(r"[a-z]+\d+[a-z]*\.\d*x?large|[a-z]+\d+[a-z]*\.metal", product) else None
