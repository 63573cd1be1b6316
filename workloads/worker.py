"""BenchWorker: one rank. A plain class; the driver turns it into a Ray actor.

torch is imported where a method needs it, not with the module: the driver imports this module to
make the actor class, and a driver that imported torch (1.5 s here) for that paid it on every run.

Lifecycle per group: every member `join()`s through the run's rendezvous store (in the driver;
each worker keeps one connection to it), the driver sends `run()` cases, then `leave()`. Messages are the dataclasses of
`workloads.messages`.
The same worker serves many groups in turn; it is never in two groups at once.
"""

from __future__ import annotations

import os
import platform
import socket
import tempfile
import time
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING

from workloads import cuda_order, gpus, inspector, nccl_log
from workloads.comm_env import COMM_ENV_PREFIXES, pin_interfaces, scheduler_node_name
from workloads.messages import Case, Joined, JoinRequest, Left, NcclLog, ReplayTiming, Sample, Transport, WorkerInfo

if TYPE_CHECKING:
    import torch.distributed as dist


# torch's TORCH_NCCL_ASYNC_ERROR_HANDLING values (ProcessGroupNCCL.hpp): 0 nothing, 1 abort and tear
# the process down, 2 abort the communicators only (CleanUpOnly), 3 tear down without aborting (the default)
ABORT_AND_RAISE = "2"


class BenchWorker:
    def __init__(self, node_ip: str | None = None) -> None:
        cuda_order.install()  # the fake-GPU cluster's record of what touches CUDA, and when (its tests only)
        import torch

        from workloads.clocks import batch_floor_us

        # Communication variables (--env) come in the actor's runtime_env: in place before any
        # communicator is created.
        self._gpu: torch.device | None = None
        self._device = torch.device("cpu")  # where the current group's buffers live
        self._store: dist.TCPStore | None = None
        self._rank = 0
        self._world_size = 1
        self._backend = "gloo"
        # NCCL's debug file of this process (GPU workers), read group by group; it keeps what NCCL
        # prints once per process (version, devices, provider) for every later group's account.
        self._nccl_log: nccl_log.DebugFile | None = None
        # The NCCL Inspector's file of this process, where --env loads the plugin (workloads.inspector)
        self._inspector: inspector.DumpFile | None = None
        # The node's address as the cluster knows it (the driver passes it from ray.nodes()).
        self._ip = node_ip or _node_ip()
        self._ifname = pin_interfaces(self._ip)
        self._floor_us = batch_floor_us(torch.device("cpu"))  # the manifest's empty-call floor (host clock)
        self._gpu_floor_us: float | None = None
        self._dispatch_us = _dispatch_floor("gloo", torch.device("cpu"))  # after the interface pins: gloo's device
        self._gpu_dispatch_us: float | None = None

    def describe(self) -> WorkerInfo:
        """Where this rank runs; cheap, and touches no device."""
        import ray
        import torch

        nccl = None
        gpu_ids = tuple(str(g) for g in ray.get_gpu_ids())
        if torch.version.cuda and gpu_ids:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        return WorkerInfo(
            node_id=ray.get_runtime_context().get_node_id(),
            node_ip=self._ip,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            gpu_ids=gpu_ids,
            cpu_model=_cpu_model(),
            torch_version=str(torch.__version__),  # a TorchVersion would make the driver import torch to read it
            nccl_version=nccl,
            comm_env={k: v for k, v in os.environ.items() if k.startswith(COMM_ENV_PREFIXES)},
            device_index=self._gpu.index if self._gpu is not None else None,
            batch_floor_us=self._floor_us,
            gpu_batch_floor_us=self._gpu_floor_us,
            dispatch_floor_us=self._dispatch_us,
            gpu_dispatch_floor_us=self._gpu_dispatch_us,
            niceness=os.nice(0),
            scheduler_node=scheduler_node_name(os.environ),
            gpu_bus=gpus.bus_of_uuids().get(gpu_ids[0]) if gpu_ids and gpu_ids[0].startswith("GPU-") else None,
        )

    def use_gpu(self, visible_devices: str, local_index: int) -> WorkerInfo:
        """See every GPU of the node's workers and use one of them (NVLink/P2P between actors of
        one node needs this), and have NCCL log what it uses to a file of this process; must run
        before anything initialises CUDA or NCCL. Returns the description with both."""
        import torch

        from workloads.clocks import batch_floor_us

        if torch.cuda.is_initialized():  # the mask would be read too late: cuda:i is not the GPU planned
            raise RuntimeError(f"CUDA was initialised in this worker (pid {os.getpid()}) before its mask "
                               f"CUDA_VISIBLE_DEVICES={visible_devices} was set: a defect of collbench, report it")
        os.environ["CUDA_VISIBLE_DEVICES"] = visible_devices
        cuda_order.masked()
        # a failed collective aborts this rank's communicators and raises here, as gloo's peers
        # raise, instead of torch's default (3: the process torn down): the driver blames the ranks
        # whose process died, and a healthy peer of a killed rank must not die with it. --env keeps
        # a user's own value.
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", ABORT_AND_RAISE)
        self._gpu = torch.device("cuda", local_index)
        self._nccl_log = nccl_log.DebugFile(nccl_log.configure(os.environ))
        nccl_log.remove_stale(tempfile.gettempdir(), socket.gethostname())  # earlier workers' files on this node
        self._inspector = inspector.DumpFile.for_process(os.environ, socket.gethostname(), os.getpid())
        # after CUDA_VISIBLE_DEVICES; a torch that cannot use the GPU has been refused for NCCL runs
        # (sweep.devices.check_driver), and a gloo run on this node needs no floor of the GPU
        if torch.cuda.is_available():
            self._gpu_floor_us = batch_floor_us(self._gpu)
            self._gpu_dispatch_us = _dispatch_floor("nccl", self._gpu)
        return self.describe()

    def ping(self) -> int:
        """This process answers (called in its own concurrency group, beside a running call)."""
        return os.getpid()

    def connect_store(self, ip: str, port: int, timeout_s: float) -> None:
        """Connect to the run's rendezvous store, once for every group this worker will join."""
        import torch.distributed as dist

        self._store = dist.TCPStore(ip, port, is_master=False, timeout=timedelta(seconds=timeout_s))

    def join(self, req: JoinRequest) -> Joined:
        """Form the torch.distributed group `req` describes through the run's store, under the
        group's own key prefix; return what it used."""
        import torch
        import torch.distributed as dist

        timeout = timedelta(seconds=req.timeout_s)
        self._store.set_timeout(timeout)
        if dist.is_initialized():
            dist.destroy_process_group()
        self._rank, self._world_size, self._backend = req.rank, req.world_size, req.backend
        if self._nccl_log is not None:
            self._nccl_log.start_group()
        if self._inspector is not None:
            self._inspector.start_group()
        kwargs = {}
        # gloo measures host memory even on GPU nodes (--backend gloo there tests the TCP path).
        self._device = self._gpu if req.backend == "nccl" else torch.device("cpu")
        if req.backend == "nccl":
            torch.cuda.set_device(self._device)
            kwargs["device_id"] = self._device  # set up the communicator now, not in a timed call
        t0 = time.perf_counter()
        dist.init_process_group(
            req.backend,
            store=dist.PrefixStore(req.group_id, self._store),
            rank=self._rank,
            world_size=self._world_size,
            timeout=timeout,
            **kwargs,
        )
        init_s = time.perf_counter() - t0
        name = torch.cuda.get_device_name(self._device) if self._device.type == "cuda" else _cpu_model()
        return Joined(device=str(self._device), device_name=name, transport=self._transport(), init_s=init_s)

    def run(self, case: Case) -> list[Sample] | list[ReplayTiming]:
        """Measure one case; this rank's raw samples per message size (a replay: per op and step)."""
        from workloads.harness import run_case

        return run_case(case, self._rank, self._world_size, self._device)

    def leave(self) -> Left:
        """Destroy the group, timed; what it used, from everything NCCL logged since it was formed,
        and the NCCL Inspector's records of it where the plugin is loaded."""
        import torch.distributed as dist

        transport = self._transport()
        t0 = time.perf_counter()
        if dist.is_initialized():
            dist.destroy_process_group()
        destroy_s = time.perf_counter() - t0
        if self._inspector is not None and self._backend == "nccl":
            transport = replace(transport, inspector=self._inspector.group_ops())
        return Left(transport, destroy_s)

    def _transport(self) -> Transport:
        if self._backend != "nccl":
            return Transport("gloo", interface=self._ifname)
        return Transport("nccl", nccl=self._nccl_log.group_log() if self._nccl_log is not None else NcclLog())


def _dispatch_floor(backend: str, device) -> float | None:
    """c10d's own cost of a call on `backend` (workloads.clocks), or None where it cannot be
    measured here: an aid to reading small sizes, never a reason for a worker not to start."""
    from workloads.clocks import dispatch_floor_us

    try:
        return dispatch_floor_us(backend, device)
    except Exception:  # a backend this process cannot form a group of alone: the rows say nothing of it
        return None


def _node_ip() -> str:
    try:
        import ray

        return ray.util.get_node_ip_address()
    except Exception:  # outside Ray (direct use in tests): the loopback address
        return "127.0.0.1"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
