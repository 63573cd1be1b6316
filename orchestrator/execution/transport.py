"""A group's transport columns from what its ranks read in NCCL's log (or gloo's interface).
Pure: the group's rows say which rank ran on which node.

- nccl_version: the loaded library's banner (several versions joined by "," would be a mixed fleet);
- net_transport: for a group that spans nodes, the network NCCL used (`Using network`), then what
  it ran on: "IB/RoCE", "Socket/eth0", "AWS Libfabric/efa", and "/GDRDMA" when GPUDirect RDMA
  carried a channel; on gloo, "gloo/tcp/<interface>";
- intra_transport: the paths NCCL connected between ranks of one node: P2P (with the ring graph's
  link type: P2P/NVL over NVLink, P2P/PIX over a PCIe switch), SHM, NET (through the NIC), and
  NVLS; joined by "+";
- the build (BUILD): nccl_git_hash, nccl_net_plugin ("Libfabric (v11) aws-ofi-nccl 1.18.0": the plugin NCCL
  loaded, which is not always the one it used: net_transport says that), nccl_tuner_plugin,
  nccl_profiler_plugin, nccl_cta_policy (each the ranks' distinct values joined by ","), and
  nccl_buffers_registered (the kinds of user buffers any rank registered: IPC, NET, NVLS, COLLNET, by "+");
- per measured row, where the ranks loaded the NCCL Inspector (`inspector_fields`): its kernel-timed
  bus bandwidth and time of the row's collective and size, and how many records it wrote.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from orchestrator.execution.rows import where
from workloads import inspector
from workloads.messages import NcclLog, Status, Transport

# The build's columns, each from one rank's log; the manifest keeps the run's values (BUILD_MANIFEST)
BUILD: dict[str, Callable[[NcclLog], str | None]] = {
    "nccl_git_hash": lambda log: log.git_hash,
    "nccl_net_plugin": lambda log: " ".join(filter(None, (log.net_plugin, log.net_plugin_release))) or None,
    "nccl_tuner_plugin": lambda log: log.tuner_plugin,
    "nccl_profiler_plugin": lambda log: log.profiler_plugin,
    "nccl_cta_policy": lambda log: log.cta_policy,
}
BUILD_MANIFEST = ("nccl_version", *BUILD)  # per run; registration is a group's own
COLUMNS = ("gpu_model", "nccl_version", "net_transport", "intra_transport", *BUILD, "nccl_buffers_registered")

# Names a network goes by: --expect-net takes any of them.
ALIASES = {
    "efa": {"aws libfabric", "libfabric", "ofi"},
    "ib": {"ib", "ibext"},
    "tcpx": {"gpudirecttcpx"},
    "tcpxo": {"fastrak"},
}


def _kind(path: str) -> str:
    return path.split("/", 1)[0]


def columns(backend: str, node_ids: Sequence[str], transports: Sequence[Transport | None]) -> dict:
    """nccl_version, net_transport and intra_transport of one group (its ranks' transports)."""
    spans_nodes = len(set(node_ids)) > 1
    if not any(transports):
        return {}
    if backend != "nccl":
        interface = next((t.interface for t in transports if t and t.interface), None)
        return {"net_transport": f"gloo/tcp/{interface}" if interface else "gloo/tcp"}
    logs = [t.nccl for t in transports if t and t.nccl]
    if not logs:
        return {}
    versions = sorted({log.version for log in logs if log.version})
    out = {"nccl_version": ",".join(versions) or None}
    build = {column: ",".join(sorted({v for log in logs if (v := read(log))})) for column, read in BUILD.items()}
    build["nccl_buffers_registered"] = "+".join(sorted({kind for log in logs for kind in log.registered}))
    out.update((column, value) for column, value in build.items() if value)  # what no rank logged stays null
    if spans_nodes:
        out["net_transport"] = _network(logs)
    intra, link = set(), next((log.intra_link for log in logs if log.intra_link), None)
    for log in logs:
        for rank, peer, path in log.channels:
            if rank < len(node_ids) and peer < len(node_ids) and node_ids[rank] == node_ids[peer]:
                intra.add(f"P2P/{link}" if _kind(path) == "P2P" and link else _kind(path))
        if log.nvls:
            intra.add("NVLS")
    out["intra_transport"] = "+".join(sorted(intra)) or None
    return out


def inspector_fields(row: dict, transports: Sequence[Transport | None]) -> dict:
    """A measured row's inspector_* columns from its group's ranks' transports as they left
    (workloads.inspector.columns); nothing where no rank loaded the Inspector."""
    if row.get("status") != Status.OK.value:
        return {}
    return inspector.columns(row, [t.inspector if t else None for t in transports])


def _network(logs: Sequence[NcclLog]) -> str | None:
    names = sorted({log.network for log in logs if log.network})
    if not names:
        return None
    parts = [",".join(names)]
    # Device lists and the provider are process-wide facts (workloads.nccl_log.PROCESS_WIDE) that a
    # network NCCL initialised but did not choose also prints: each counts only under its network.
    if any(network_matches("ib", name) for name in names):
        parts += sorted({layer for log in logs for layer in log.link_layers} - {"IB"})
    if "Socket" in names:
        parts += sorted({i for log in logs for i in log.interfaces})
    if any(network_matches("efa", name) for name in names):
        parts += sorted({log.provider for log in logs if log.provider})
    if any("GDRDMA" in path for log in logs for _, _, path in log.channels if _kind(path) == "NET"):
        parts.append("GDRDMA")
    return "/".join(parts)


def network_matches(expected: str, network: str | None) -> bool:
    """Whether NCCL's network name (or gloo's "gloo/tcp/...") is the one --expect-net names."""
    if network is None:
        return False
    name = network.split("/", 1)[0].strip().lower().split("_v")[0]
    want = expected.strip().lower()
    return name == want or name in ALIASES.get(want, set()) or (name.startswith("ibext") and want == "ib")


def unexpected_network(expected: str | None, backend: str, base: dict,
                       transports: Sequence[Transport | None]) -> tuple[list[int], str] | None:
    """For a group that spans nodes and --expect-net: the ranks that would use another network
    and the error that says so, or None."""
    wrong = wrong_network(expected, backend, transports) if expected and base["n_nodes"] > 1 else []
    if not wrong:
        return None
    rank, used = wrong[0]
    return [j for j, _ in wrong], (f"inter-node traffic would use {used} (rank {rank} on {where(base, rank)}), "
                                   f"not {expected} (--expect-net)")


def wrong_network(expected: str, backend: str, transports: Sequence[Transport | None]) -> list[tuple[int, str]]:
    """Ranks whose inter-node traffic would not use `expected`: (rank, what it uses instead)."""
    wrong = []
    for rank, t in enumerate(transports):
        used = "gloo" if backend != "nccl" else (t.nccl.network if t and t.nccl else None)
        if not network_matches(expected, used):
            wrong.append((rank, used or "nothing NCCL logged"))
    return wrong
