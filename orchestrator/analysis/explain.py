"""Why a number is below what it should be: the facts that explain a gap, from the rows' own
columns (net_transport, intra_transport, platform, world size, size) and, where the run recorded
them (its manifest's `doctor` facts, read on every node as the run started), the nodes' GPUs,
NICs and links. Each reason says what it is and the evidence; where nothing recorded explains the
gap, that is said too. Pure.

The rules are the answers maintainers give to "is this normal?" (nccl-tests and NCCL issues):
sockets used where RDMA NICs are present; InfiniBand without GPUDirect RDMA; fewer NICs used than
the node has; a PCIe link trained down; intra-node traffic through SHM or the network where the
GPUs have NVLink; NVLS figures beside a ring figure (and NVLSTree's inflated busbw across two
nodes); a size where latency still dominates; another world size than the reference's; clocks
held down.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace

import numpy as np
import pandas as pd

_NVLINK_TAGS = ("-sxm", "-nvl", "b200", "b100", "gb200")
_RDMA_TAGS = ("ib-", "roce-", "efa")
_HW_EVENTS = {0x4: "SW power cap", 0x8: "HW slowdown", 0x20: "SW thermal slowdown", 0x40: "HW thermal slowdown",
              0x80: "HW power brake"}


@dataclass(frozen=True)
class Reason:
    kind: str
    message: str
    evidence: str

    def to_json(self) -> dict:
        return asdict(self)


UNEXPLAINED = Reason("unexplained", "nothing collbench recorded explains the gap",
                     "transports, platform, sizes and the nodes' facts show no known cause; compare with a "
                     "healthy node (collbench compare) or run collbench doctor on these nodes")


# the rows' columns explain reads (callers that explain many flags keep only these)
COLUMNS = ("collective", "topology", "world_size", "n_nodes", "msg_bytes", "busbw_gbps", "net_transport",
           "intra_transport", "platform", "gpu_model")
_STRINGS = ("topology", "net_transport", "intra_transport", "platform", "gpu_model")


@dataclass(frozen=True)
class Evidence:
    """What the rules read from one shape's rows (`mine`) and the same shape's rows at larger sizes
    (`bigger`): the distinct transports, platforms and topologies, and a few figures."""
    nets: list[str]
    intras: list[str]
    tags: set[str]
    topologies: set[str]
    on_gpus: bool
    two_nodes: bool  # a group of 2 nodes among them
    busbw: float | None  # the median busbw (None: no rows)
    max_bytes: int | None
    max_world: int | None
    top: tuple[float, int] | None  # (busbw, msg_bytes) of the fastest bigger row


class Rows:
    """The explained columns of a set of rows as arrays (strings as codes into their categories), so
    that the evidence of any subset is a few numpy operations: a report with thousands of flags
    takes each one's evidence without building a DataFrame for it. `order`: each row's place in the
    run (ties for the fastest row go to the first), where the rows are held in another order."""

    def __init__(self, df: pd.DataFrame, order: np.ndarray | None = None) -> None:
        self._strings = {}
        for c in _STRINGS:
            if c in df:
                cat = df[c] if isinstance(df[c].dtype, pd.CategoricalDtype) else df[c].astype("category")
                self._strings[c] = (cat.cat.codes.to_numpy(), list(cat.cat.categories))
        self._numbers = {c: df[c].to_numpy(dtype=float, na_value=np.nan) for c in ("n_nodes", "world_size",
                                                                                     "msg_bytes", "busbw_gbps")
                         if c in df}
        self._order = np.arange(len(df)) if order is None else order

    def _distinct(self, column: str, idx: np.ndarray) -> list[str]:
        if column not in self._strings:
            return []
        codes, categories = self._strings[column]
        counts = np.bincount(codes[idx] + 1, minlength=len(categories) + 1)[1:]  # code -1: null
        return sorted(str(categories[c]) for c in np.flatnonzero(counts))

    def _number(self, column: str, idx: np.ndarray) -> np.ndarray:
        """The column's values at `idx` without its nulls."""
        values = self._numbers.get(column)
        if values is None:
            return np.array([])
        values = values[idx]
        return values[~np.isnan(values)]

    def fastest(self, idx: np.ndarray) -> tuple[float, int] | None:
        """(busbw, msg_bytes) of the fastest of rows `idx`: the first in the run's order, as pandas'
        idxmax (None: no busbw)."""
        if not len(idx) or "busbw_gbps" not in self._numbers or "msg_bytes" not in self._numbers:
            return None
        busbw = self._numbers["busbw_gbps"][idx]
        if np.isnan(busbw).all():
            return None
        peak = np.nanmax(busbw)
        ties = idx[busbw == peak]
        return float(peak), int(self._numbers["msg_bytes"][ties[np.argmin(self._order[ties])]])

    def evidence(self, mine: np.ndarray, bigger: np.ndarray | None = None) -> Evidence:
        """The evidence of rows `mine` (positions) and `bigger` (positions of the larger sizes' rows)."""
        busbw, size, world = (self._number(c, mine) for c in ("busbw_gbps", "msg_bytes", "world_size"))
        top = self.fastest(bigger) if bigger is not None and len(mine) else None
        return Evidence(
            nets=self._distinct("net_transport", mine), intras=self._distinct("intra_transport", mine),
            tags={t for p in self._distinct("platform", mine) for t in p.split("+")},
            topologies=set(self._distinct("topology", mine)),
            on_gpus=bool("gpu_model" in self._strings and (self._strings["gpu_model"][0][mine] >= 0).any()),
            two_nodes=bool((self._number("n_nodes", mine) == 2).any()),
            busbw=float(np.median(busbw)) if len(busbw) else None,
            max_bytes=int(size.max()) if len(size) else None,
            max_world=int(world.max()) if len(world) else None, top=top)


def explain(rows: pd.DataFrame, ips: Iterable[str], entry=None, facts: dict[str, dict] | None = None,
            bigger: pd.DataFrame | None = None) -> list[Reason]:
    """The reasons for a gap of `rows` (one shape's ok rows) on nodes `ips` against `entry` (an
    expected.Entry, or None when the reference is the peers); `bigger`: the same shape's rows at
    larger sizes. UNEXPLAINED alone when no rule applies."""
    found = Rows(rows).evidence(np.arange(len(rows)))
    if bigger is not None and len(rows):
        found = replace(found, top=Rows(bigger).fastest(np.arange(len(bigger))))
    return reasons(found, ips, entry, facts)


def reasons(ev: Evidence, ips: Iterable[str], entry=None, facts: dict[str, dict] | None = None) -> list[Reason]:
    """The reasons the evidence and the nodes' facts give (UNEXPLAINED alone when no rule applies)."""
    facts = facts or {}
    ips = list(dict.fromkeys(ips))
    mine = [facts[ip] for ip in ips if ip in facts]
    out: list[Reason] = []
    out += _network(ev.nets, ev.tags, mine, ev.on_gpus)
    out += _nics(mine)
    out += _pcie(mine, ips, facts)
    out += _intra(ev, mine)
    out += _nvls(ev, entry)
    out += _latency(ev)
    out += _world(ev, entry)
    out += _clocks(mine, ips, facts)
    return out or [UNEXPLAINED]


def _network(nets: list[str], tags: set[str], mine: list[dict], on_gpus: bool) -> list[Reason]:
    out = []
    rdma = [d for f in mine for d in f.get("rdma", [])]
    has_rdma = bool(rdma) or any(t.startswith(_RDMA_TAGS) for t in tags)
    socket = [n for n in nets if n.startswith("Socket")]
    if socket and has_rdma:
        kinds = sorted({d["kind"] for d in rdma}) or sorted(t for t in tags if t.startswith(_RDMA_TAGS))
        out.append(Reason("sockets_not_rdma", f"NCCL sent the inter-node traffic over sockets ({', '.join(socket)}) "
                          f"though the nodes have RDMA NICs ({', '.join(kinds)})",
                          "NCCL did not load its IB/EFA transport: is libibverbs (or aws-ofi-nccl for EFA) in the "
                          "image, /dev/infiniband in the container, NCCL_IB_DISABLE or NCCL_NET unset?"))
    rdma_paths = [n for n in nets if not n.startswith(("Socket", "gloo"))]
    if rdma_paths and on_gpus and not any("GDRDMA" in n for n in rdma_paths):
        no_module = [f["ip"] for f in mine if f.get("gpus") and not f.get("peermem") and not f.get("dmabuf")]
        out.append(Reason("no_gdrdma", f"GPUDirect RDMA was not used ({', '.join(rdma_paths)}: no GDRDMA in NCCL's "
                          "channels): every message is staged through host memory",
                          ("nvidia_peermem is not loaded and dma-buf is not available on "
                           f"{', '.join(no_module)}" if no_module else
                           "NCCL_NET_GDR_LEVEL, the NIC's distance to the GPU (nvidia-smi topo -m) or the module")))
    return out


def _nics(mine: list[dict]) -> list[Reason]:
    out = []
    for f in mine:
        hca = (f.get("env") or {}).get("NCCL_IB_HCA")
        devices = [d["name"] for d in f.get("rdma", []) if d["kind"] != "EFA"]
        if hca and devices:
            names = [x.split(":")[0].lstrip("=^") for x in hca.split(",") if x]
            used = [d for d in devices if any(d.startswith(n) for n in names)]
            if not hca.startswith("^") and len(used) < len(devices):
                out.append(Reason("fewer_nics", f"{f['ip']}: NCCL_IB_HCA={hca} uses {len(used)} of the node's "
                                  f"{len(devices)} RDMA NICs", f"present: {', '.join(devices)}"))
    return out


def _pcie(mine: list[dict], ips: list[str], facts: dict[str, dict]) -> list[Reason]:
    out = []
    for ip in ips:
        f = facts.get(ip)
        if not f:
            continue
        for g in f.get("gpus", []):
            width, max_width = g.get("pcie_width") or (None, None)
            if width and max_width and width < max_width:
                out.append(Reason("pcie_downtrained", f"{ip}: GPU {g['index']}'s PCIe link runs at x{width} of "
                                  f"x{max_width}", f"nvidia-smi pcie.link.width {width}/{max_width} ({g['bus_id']})"))
        for d in f.get("rdma", []):
            width, max_width = d.get("pcie_width") or (None, None)
            speed, max_speed = d.get("pcie_speed") or (None, None)
            if (width and max_width and width < max_width) or (speed and max_speed and speed < max_speed):
                out.append(Reason("pcie_downtrained", f"{ip}: {d['name']}'s PCIe link runs at x{width} {speed} GT/s "
                                  f"of x{max_width} {max_speed} GT/s",
                                  f"/sys/class/infiniband/{d['name']}/device/current_link_*"))
    return out


def _intra(ev: Evidence, mine: list[dict]) -> list[Reason]:
    intras = ev.intras
    if not intras or not ev.topologies & {"intra", "mixed"}:
        return []
    nvlink = any(t.endswith(_NVLINK_TAGS) or t in _NVLINK_TAGS for t in ev.tags) or any(
        (g.get("nvlinks_active") or 0) > 0 for f in mine for g in f.get("gpus", []))
    slow = sorted({p for t in intras for p in t.split("+") if p in ("SHM", "NET") or p.startswith("P2P/P")})
    if nvlink and slow:
        return [Reason("intra_not_nvlink", f"traffic inside the node went through {', '.join(slow)}, not NVLink",
                       f"intra_transport {', '.join(intras)} on GPUs with NVLink: is NCCL_P2P_DISABLE set, or "
                       "P2P refused between the workers' devices (CUDA_VISIBLE_DEVICES masking)?")]
    return []


def _nvls(ev: Evidence, entry) -> list[Reason]:
    """NVLS (NVLink SHARP: the NVSwitch reduces) makes all_reduce's busbw count bytes no wire
    carried (nccl-tests computes it with the ring's formula): on 8 Hopper GPUs ~480 where the
    wire's bandwidth, a ring's busbw, is ~370. Said whenever NCCL used it, as the maintainers do."""
    intras = ev.intras
    if not any("NVLS" in t for t in intras):
        return []
    if entry is not None and entry.transport == "NVLS":
        out = [Reason("nvls_busbw", "NCCL used NVLS (NVLink SHARP: the switch reduces): busbw counts what the switch "
                      "reduces, not the bandwidth on the wire, which a ring shows (NCCL_ALGO=Ring); the reference is "
                      "NVLS's own", f"intra_transport {', '.join(intras)}; {entry.source}")]
    else:
        out = [Reason("nvls_not_comparable", "NCCL used NVLS (NVLink SHARP: the switch reduces): its busbw is not "
                      "comparable with a ring figure", f"intra_transport {', '.join(intras)}; the reference "
                      + (f"({entry.source}) is a ring figure" if entry is not None else "is its peers' figure"))]
    if ev.two_nodes:
        out.append(Reason("nvls_tree_two_nodes", "on two nodes NCCL may choose NVLSTree, whose busbw counts bytes the "
                          "switches reduce: higher than the network carries, and not comparable with other sizes of "
                          "cluster", "n_nodes 2 with NVLS; NCCL_ALGO=Ring gives the ring figure"))
    return out


def _latency(ev: Evidence) -> list[Reason]:
    if ev.top is None or ev.busbw is None:
        return []
    here, (top_busbw, top_bytes) = ev.busbw, ev.top
    if here > 0 and top_busbw > 1.1 * here:
        return [Reason("latency_bound", f"at {ev.max_bytes} B the time is still mostly latency: busbw "
                       f"rises to {top_busbw:.4g} GB/s at {top_bytes} B",
                       f"busbw {here:.4g} GB/s here; compare at the largest sizes (-e 1G or more on GPUs)")]
    return []


def _world(ev: Evidence, entry) -> list[Reason]:
    if entry is None or entry.min_world <= 1 or ev.max_world is None:
        return []
    if ev.max_world != entry.min_world:
        return [Reason("world_size", f"the reference is for {entry.min_world} ranks, this group has {ev.max_world}",
                       f"{entry.source}: busbw of rings and trees changes with the number of ranks")]
    return []


def _clocks(mine: list[dict], ips: list[str], facts: dict[str, dict]) -> list[Reason]:
    out = []
    for ip in ips:
        for g in (facts.get(ip) or {}).get("gpus", []):
            held = [label for bit, label in _HW_EVENTS.items() if (g.get("events") or 0) & bit]
            if held:
                out.append(Reason("throttled", f"{ip}: GPU {g['index']}'s clocks were held down ({', '.join(held)})",
                                  f"clocks event reasons 0x{g['events']:x} when the run started"))
    return out
