"""NCCL settings known to cost bandwidth, hang or corrupt results: one table, each entry with when
it applies, what it does, the fix and its source. doctor judges every node's variables (those its
Ray processes have, with a run's `--env` on top) against it; a finding on every node is said once
for the cluster; one on some nodes is said on each of them, and the cluster's line names them.

To add a setting, add a row to SETTINGS: `harmful(value, node)` says whether this value hurts on
this node (a RoCE-only harm asks the node's NICs). docs/reference/nccl-settings.md is this table
(scripts/gen_reference.py writes it from SETTINGS).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.doctor.checks import FAIL, OK, WARN, Check, CheckStatus
from orchestrator.doctor.facts import NodeFacts

ENV_DOCS = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"


@dataclass(frozen=True)
class Setting:
    variable: str
    when: str  # the values (and nodes) it hurts at, in words
    harmful: Callable[[str, NodeFacts], bool]
    status: CheckStatus
    effect: str
    fix: str
    source: str


def _bytes(value: str) -> int | None:
    """NCCL reads sizes as plain integers (bytes); a K/M/G suffix is read as a person means it."""
    text = value.strip().upper().removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    digits = text[:-1] if scale > 1 else text
    return int(digits) * scale if digits.isdigit() else None


def _on(value: str) -> bool:
    return value.strip() == "1"


def _roce(node: NodeFacts) -> bool:
    return any(d.kind == "RoCE" for d in node.rdma)


def _chunk(value: str, _node: NodeFacts) -> bool:
    size = _bytes(value)
    return size is not None and size >= 1 << 20


SETTINGS: tuple[Setting, ...] = (
    Setting("NCCL_CHUNK_SIZE", "1 MiB (1048576) or more", _chunk, FAIL,
            "send/recv and all-to-all returned wrong results (and Xid 31 faults) at 1 MiB and more on NCCL 2.31.2; "
            "an undocumented variable", "unset it (NCCL sizes its chunks itself; 512 KiB and less were correct)",
            "https://github.com/NVIDIA/nccl/issues/2408"),
    Setting("NCCL_P2P_NET_CHUNKSIZE", "1 MiB (1048576) or more", _chunk, WARN,
            "set with NCCL_CHUNK_SIZE in the wrong-results report (not reproduced alone); chunks that differ from "
            "NCCL_CHUNK_SIZE gave wrong results before (NVIDIA/nccl#1496)",
            "keep it at its default (128 KiB) unless measured otherwise", "https://github.com/NVIDIA/nccl/issues/2408"),
    Setting("NCCL_IGNORE_NET_MISMATCH", "1", lambda v, n: _on(v), WARN,
            "NICs that differ between nodes (one that fails to open) are ignored: communicators then hang silently "
            "instead of failing at init", "set it to 0 so a mismatch fails at init, and fix the NIC (doctor's RDMA "
            "and `same RDMA NICs` checks)", "https://github.com/NVIDIA/nccl/issues/2428"),
    Setting("NCCL_IB_SPLIT_DATA_ON_QPS", "1, on a node with RoCE NICs", lambda v, n: _on(v) and _roce(n), WARN,
            "each message split over the queue pairs: unset, it took a 2x8 H100 RoCE cluster about 2x (the default "
            "is 0 since NCCL 2.20; some fabrics are tuned to 1 for more)",
            "unset it unless measured faster with it on this fabric", "https://github.com/NVIDIA/nccl/issues/2409"),
    Setting("NCCL_ALGO", "any value", lambda v, n: bool(v.strip()), WARN,
            "the algorithm is forced: NCCL's tuner cannot choose per size, and a benchmark measures that algorithm, "
            "not what a job gets", "unset it unless that algorithm is what is being measured", ENV_DOCS),
    Setting("NCCL_PROTO", "any value", lambda v, n: bool(v.strip()), WARN,
            "the protocol is forced: small messages lose LL's latency or large ones Simple's bandwidth; LL128 where "
            "it is not supported can corrupt data",
            "unset it unless that protocol is what is being measured", ENV_DOCS),
    Setting("NCCL_P2P_DISABLE", "1", lambda v, n: _on(v), WARN,
            "GPUs of a node stop using NVLink and PCIe peer-to-peer: their traffic goes through host memory",
            "unset it (a P2P fault it hid is a fault to fix: doctor's NVLink, PCIe ACS and IOMMU checks)", ENV_DOCS),
    Setting("NCCL_SHM_DISABLE", "1", lambda v, n: _on(v), WARN,
            "without shared memory, GPUs that cannot use P2P exchange over the network loopback",
            "unset it (give the container /dev/shm instead: doctor's /dev/shm check)", ENV_DOCS),
    Setting("NCCL_NET_GDR_LEVEL", "LOC or 0, on a node with RDMA NICs",
            lambda v, n: v.strip().upper() in ("LOC", "0") and bool(n.rdma), WARN,
            "GPUDirect RDMA is off: every network transfer is staged through host memory",
            "unset it (NCCL enables GPUDirect RDMA where the GPU and the NIC are close)", ENV_DOCS),
    Setting("NCCL_IB_DISABLE", "1, on a node with InfiniBand or RoCE NICs (EFA goes through its own plugin)",
            lambda v, n: _on(v) and any(d.kind != "EFA" for d in n.rdma), WARN,
            "NCCL leaves the RDMA NICs unused and goes over TCP sockets: a fraction of the fabric's bandwidth",
            "unset it", ENV_DOCS),
)


def findings(node: NodeFacts, env: dict[str, str]) -> list[tuple[Setting, str]]:
    """The settings of SETTINGS that hurt on this node, with their values (`env`: the node's
    variables as the collectives will see them)."""
    return [(s, env[s.variable]) for s in SETTINGS if s.variable in env and s.harmful(env[s.variable], node)]


def check(s: Setting, value: str, where: str = "") -> Check:
    return Check(s.variable, s.status, f"{s.variable}={value}{where}: {s.effect}", f"{s.fix} ({s.source})")


def settings_checks(nodes: list[NodeFacts], extra: dict[str, str] | None = None,
                    ) -> tuple[list[Check], dict[str, list[Check]]]:
    """Every node's settings against SETTINGS (`extra`: a run's --env, on top of each node's own):
    a finding on every node, same value, is the cluster's; one on some nodes is each of theirs."""
    found = {n.ip: {s.variable: (s, v) for s, v in findings(n, {**n.env, **(extra or {})})} for n in nodes}
    per_node: dict[str, list[Check]] = {n.ip: [] for n in nodes}
    cluster = []
    for variable in dict.fromkeys(v for mine in found.values() for v in mine):
        values = {ip: mine[variable][1] for ip, mine in found.items() if variable in mine}
        setting = next(mine[variable][0] for mine in found.values() if variable in mine)
        if len(values) == len(nodes) and len(set(values.values())) == 1:
            cluster.append(check(setting, next(iter(values.values())), " on every node"))
            continue
        for ip, value in values.items():
            per_node[ip].append(check(setting, value))
        cluster.append(Check(variable, setting.status, f"{variable} on {len(values)} of {len(nodes)} node(s): "
                             + ", ".join(f"{ip} ({value})" for ip, value in values.items()), setting.fix))
    if not cluster and not any(per_node.values()):
        cluster.append(Check("NCCL settings", OK, f"none of the {len(SETTINGS)} settings known to hurt is set"))
    return cluster, per_node
