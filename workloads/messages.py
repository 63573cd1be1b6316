"""What crosses the driver-worker boundary, and the small vocabulary both sides share.

Torch-free and Ray-free, so the driver imports it without a device library and the worker
without the planner. Every message is a frozen dataclass (Ray pickles them as they are).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from enum import Enum


class Status(str, Enum):
    """How a row (a measurement) ended; the `status` column."""

    OK = "ok"
    FAILED = "failed"  # a rank raised, or its process died
    TIMEOUT = "timeout"  # the group passed its deadline
    SKIPPED = "skipped"  # the group could not start (a node left, no worker)


class Stage(str, Enum):
    """Where a group is in its life, as the driver tracks it."""

    JOIN = "join"  # every rank forms the process group (through the run's rendezvous store)
    MEASURE = "measure"  # cases run one after another
    LEAVE = "leave"  # every rank destroys the process group


class Topology(str, Enum):
    """Where a group's ranks run: one node, one rank per node, or otherwise; or, where NVLink
    domain facts exist, several nodes all of one NVLink domain (an NVL72 rack: NVLink between them)."""

    INTRA = "intra"
    INTER = "inter"
    MIXED = "mixed"
    INTRA_DOMAIN = "intra-domain"


def topology_of(node_of_rank: Sequence[Hashable], domain_of_rank: Sequence[str | None] | None = None) -> Topology:
    """The topology of a group from the node of each of its ranks (any node key) and, where
    known, the NVLink domain of each rank's node: several nodes all in one domain are
    intra-domain. Without domain facts (None, or a rank without a domain) it is as it always was."""
    n_nodes = len(set(node_of_rank))
    if n_nodes == 1:
        return Topology.INTRA
    if domain_of_rank is not None and len(set(domain_of_rank)) == 1 and domain_of_rank[0] is not None:
        return Topology.INTRA_DOMAIN
    return Topology.INTER if n_nodes == len(node_of_rank) else Topology.MIXED


@dataclass(frozen=True)
class Case:
    """One (workload, dtype, op, in_place) over a list of element counts, as every rank runs it."""

    collective: str  # a collective, or the overlap workload
    dtype: str
    op: str
    in_place: bool
    counts: tuple[int, ...]
    iters: int
    warmup: int
    check_iters: int
    root: int = 0
    compute_flops: float = 0.0  # overlap only: matmul size (0: matched to the collective's time)
    cuda_graph: bool = False  # the timed batch replayed from a CUDA graph (nccl-tests' -G; NCCL only)
    replay: ReplayProgram | None = None  # collective "replay": a traced job's ops instead of counts
    # all_to_allv: its traffic matrix for this group's size (workloads.traffic; None: nccl-tests'
    # generated pattern) and where it came from (a file, a router's seed), as rows record it
    traffic: tuple[tuple[int, ...], ...] | None = None
    traffic_source: str | None = None


@dataclass(frozen=True)
class ReplayOp:
    """One traced collective as one rank replays it (orchestrator.sweep.trace)."""

    step: int
    seq: int  # its sequence number in its process group, as the trace has it
    group: str  # the trace's process group name
    kind: str  # all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce, barrier
    dtype: str
    in_numel: int
    out_numel: int
    msg_bytes: int  # nccl-tests' S
    offset_us: float = 0.0  # issued this long after its step began (--gaps), else 0: back to back
    traced_us: float | None = None  # the job's own time of it, where the trace had it
    part: int = 0  # its place among the rank's ops of one sequence number (a coalesced block)


@dataclass(frozen=True)
class ReplayProgram:
    """A traced job's steps: its process groups (name, label, global ranks) and each rank's ops."""

    world_size: int
    steps: int
    groups: tuple[tuple[str, str, tuple[int, ...]], ...]
    ops: tuple[tuple[ReplayOp, ...], ...]  # by global rank
    gaps: bool = False
    warmup_steps: int = 1  # replayed first, untimed
    repeat: int = 1  # the traced steps replayed this many times (step numbers go on)


@dataclass(frozen=True)
class ReplayTiming:
    """One rank's time of one op of one replayed step."""

    op: int  # index into the rank's ops
    repeat: int
    time_us: float


@dataclass(frozen=True)
class JoinRequest:
    """Form the process group `group_id` as rank `rank` of `world_size`."""

    group_id: str  # the key prefix of the group in the run's rendezvous store
    rank: int
    world_size: int
    backend: str
    timeout_s: float  # of the backend's own operations (longer than the driver's deadline)


@dataclass(frozen=True)
class NcclLog:
    """What NCCL's own INFO log (INIT, NET, GRAPH, ENV, REG) says it used, as one rank read it."""

    version: str | None = None  # of the library loaded, from its banner
    network: str | None = None  # `Using network X`: IB, Socket, AWS Libfabric, Libfabric, GPUDirectTCPX_v7, ...
    link_layers: tuple[str, ...] = ()  # IB, RoCE (NET/IB device list)
    interfaces: tuple[str, ...] = ()  # NET/Socket interfaces
    provider: str | None = None  # libfabric provider (NET/OFI), e.g. efa
    channels: tuple[tuple[int, int, str], ...] = ()  # (rank, peer, path after "via"), e.g. "P2P/CUMEM/read"
    nvls: bool = False  # NVLink SHARP buffers were set up
    intra_link: str | None = None  # the ring graph's intra-node link type: NVL, PIX, PXB, PHB, SYS, LOC
    warnings: tuple[str, ...] = ()  # NCCL WARN messages
    # the build NCCL ran with (workloads.nccl_log: formats and which are printed once per process)
    git_hash: str | None = None  # `NCCL git version <branch> <hash>` (NCCL 2.29+)
    net_plugin: str | None = None  # the network plugin loaded and its API version, "Libfabric (v11)"; or "internal"
    net_plugin_release: str | None = None  # the plugin's own release where it says it: "aws-ofi-nccl 1.18.0"
    tuner_plugin: str | None = None  # "nccl_ofi_tuner (v3)", or "internal"
    profiler_plugin: str | None = None  # "Example-profiler (v5)"
    cta_policy: str | None = None  # set by NCCL_CTA_POLICY: DEFAULT, EFFICIENCY, ZERO (bits joined by |)
    registered: tuple[str, ...] = ()  # kinds of user buffers this communicator registered: COLLNET, IPC, NET, NVLS


@dataclass(frozen=True)
class InspectorOps:
    """The NCCL Inspector's kernel-timed records of one collective and size on one rank, in one
    group (workloads.inspector): each record's own bus bandwidth and kernel time."""

    coll: str  # as the Inspector names it: AllReduce, AllGather, ReduceScatter, Broadcast, Reduce
    msg_bytes: int  # nccl-tests' S (AllGather, ReduceScatter: the Inspector's size times n_ranks)
    busbw_gbps: tuple[float, ...]
    time_us: tuple[float, ...]


@dataclass(frozen=True)
class Transport:
    """How a rank's group communicates: NCCL's log, or gloo's TCP interface."""

    backend: str
    interface: str | None = None  # gloo: the interface its sockets use
    nccl: NcclLog | None = None
    # the NCCL Inspector's records of the group (from leave; None: the Inspector is not loaded)
    inspector: tuple[InspectorOps, ...] | None = None


@dataclass(frozen=True)
class Joined:
    """What a rank used once it joined."""

    device: str  # "cuda:0", "cpu"
    device_name: str  # GPU model, or the CPU model
    transport: Transport | None = None  # as far as known right after forming the group
    init_s: float | None = None  # this rank's init_process_group, in seconds


@dataclass(frozen=True)
class Left:
    """What a rank used, from everything logged since its group formed, once it left the group."""

    transport: Transport
    destroy_s: float  # this rank's destroy_process_group, in seconds


@dataclass(frozen=True)
class WorkerInfo:
    """Where a worker runs; read once when it starts."""

    node_id: str
    node_ip: str
    hostname: str
    pid: int
    gpu_ids: tuple[str, ...]  # what Ray gave this worker
    cpu_model: str
    torch_version: str
    nccl_version: str | None  # the NCCL torch was built with (the loaded one is in NcclLog)
    comm_env: dict[str, str] = field(default_factory=dict)  # NCCL_*, GLOO_*, ... as the worker sees them
    device_index: int | None = None  # the CUDA device this worker uses, once told (use_gpu)
    # the harness' batch loop dispatching nothing, per call: on the host clock, and with its GPU's events
    batch_floor_us: float | None = None
    gpu_batch_floor_us: float | None = None
    niceness: int | None = None  # the process's nice value (Ray starts workers at 15 unless told otherwise)
    scheduler_node: str | None = None  # the node's name in its scheduler (comm_env.scheduler_node_name)
    gpu_bus: str | None = None  # the PCI bus of its GPU where Ray gave a GPU UUID (workloads.gpus), for its order
    # c10d's own cost of one call (workloads.clocks.dispatch_floor_us): gloo on the host, NCCL on its GPU
    dispatch_floor_us: float | None = None
    gpu_dispatch_floor_us: float | None = None

    def dispatch_floor(self, backend: str) -> float | None:
        """Its dispatch floor on `backend`: NCCL's on its GPU, gloo's on the host."""
        return self.gpu_dispatch_floor_us if backend == "nccl" else self.dispatch_floor_us


@dataclass(frozen=True)
class HostLoad:
    """How contended a rank's host was while it measured one size (workloads.contention): fractions of
    the measurement's wall time; None where the platform does not say."""

    cpu_busy_frac: float | None = None  # the rank's process CPU time (every thread) / wall time
    cpu_wait_frac: float | None = None  # its threads' run-queue wait (ready, no CPU free) / wall time
    load_per_cpu: float | None = None  # the node's 1-minute load average / its CPU count
    steal_frac: float | None = None  # the node's CPU time stolen by the hypervisor / all its CPU time


@dataclass(frozen=True)
class Sample:
    """One rank's raw measurement of one element count of a case. A count the group could not
    measure (a rank ran out of memory) has no times; the rank that failed says why in `error`."""

    count: int
    iter_time_us: tuple[float, ...]  # each timed iteration on this rank
    n_wrong: int  # mismatched elements over the check iterations
    batch_us: float | None = None  # the same iterations timed as one batch (nccl-tests' way), per iteration
    error: str | None = None
    # GPU only: the most torch allocated for this count beyond what it held before, and the run's
    # estimate of it (memory.peak_bytes, what the memory checks use)
    mem_peak_bytes: int | None = None
    mem_estimate_bytes: int | None = None
    # overlap only: the matmul alone and both together, per iteration
    comp_us: tuple[float, ...] | None = None
    step_us: tuple[float, ...] | None = None
    compute_flops: float | None = None
    host: HostLoad | None = None  # how contended the host was while this count was measured
