"""ActorPool: one BenchWorker actor per rank, pinned to its node, created once, respawned on
failure. It owns every Ray wait on actor start-up and its timeout."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import ray
from ray.actor import ActorHandle
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from orchestrator.errors import first_line
from orchestrator.execution.rendezvous import RunStore, reachable_ip
from orchestrator.sweep.inventory import Inventory, Node
from workloads.messages import WorkerInfo
from workloads.worker import BenchWorker


@dataclass(frozen=True)
class Worker:
    """One rank's actor (None once it is killed and not yet replaced) and what it said about
    itself when it started."""

    actor: ActorHandle | None
    info: WorkerInfo


class PlacementError(RuntimeError):
    """Actors did not start on their nodes in time; the message names the nodes."""


def placement_bundles(pg, timeout_s: float = 60.0) -> list[tuple[str, dict]]:
    """Each bundle of a caller's placement group: its node id and resources, in bundle order,
    once the group is placed (a group that cannot be placed says so after `timeout_s`)."""
    try:
        ray.get(pg.ready(), timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        raise PlacementError(f"the placement group was not placed within {timeout_s:.0f}s") from None
    table = ray.util.placement_group_table(pg)
    nodes, resources = table["bundles_to_node_id"], table["bundles"]
    return [(nodes[i], dict(resources[i])) for i in sorted(resources)]


def _bundle_per_slot(inv: Inventory, slots: list[tuple[int, int]], pg) -> list[int]:
    """The bundle each slot's worker goes in: a node's slots take that node's bundles in order."""
    by_node: dict[str, list[int]] = {}
    for index, (node_id, _) in enumerate(placement_bundles(pg)):
        by_node.setdefault(node_id, []).append(index)
    return [by_node[inv.nodes[i].node_id][j] for i, j in slots]


def _gpu_key(gpu_id: str, bus: str | None = None) -> tuple[str, int, str]:
    """Decimal ids in numeric order; GPU UUIDs by their PCI bus where the worker read it (the
    order nvidia-smi numbers them in), else as strings."""
    return (bus or "", len(gpu_id), gpu_id)


def gpu_assignment(gpu_ids: list[str], buses: list[str | None] | None = None) -> tuple[str, list[int]]:
    """The actors of one node share visibility of all their GPUs and each uses its own.

    gpu_ids: the GPU id Ray gave each actor of the node; buses: each one's PCI bus where known
    (GPU UUIDs: WorkerInfo.gpu_bus). Returns the CUDA_VISIBLE_DEVICES value (the union, in
    numeric or bus order: cuda:i is then nvidia-smi's GPU order) and each actor's index into it.
    ValueError for two MIG devices or more: CUDA shows a process only the first MIG device of
    such a list, so every actor but one would have no device (and NCCL joins no MIG instances).
    """
    bus_of = dict(zip(gpu_ids, buses or [None] * len(gpu_ids)))
    union = sorted(set(gpu_ids), key=lambda g: _gpu_key(g, bus_of[g]))
    mig = [g for g in union if g.startswith("MIG-")]
    if mig and len(union) > 1:
        raise ValueError(f"{len(union)} workers were given MIG devices ({mig[0]}, ...): CUDA shows a process "
                         "one MIG device of a list and NCCL does not join MIG instances; run on GPUs without "
                         "MIG (nvidia-smi -mig 0), or with --backend gloo")
    return ",".join(union), [union.index(g) for g in gpu_ids]


class ActorPool:
    """The workers of a run, one slot per global rank: slot r lives on node `slots[r][0]` of the
    inventory. A slot without a live worker (its node left, or a replacement did not start)
    keeps the description of its last one, for the rows that say what could not run there."""

    def __init__(self, inv: Inventory, env: dict[str, str], start_timeout_s: float, name: str = "collbench",
                 placement_group=None, cpus_per_rank: float = 0.0) -> None:
        """`placement_group`: a caller's, whose bundles (one per rank, on the inventory's nodes)
        hold the workers; else each worker is pinned to its node. `cpus_per_rank`: CPUs a CPU rank
        asks Ray for (0: none; `watch` asks one, so that a node another job fills is not used)."""
        self.inv = inv
        self.placement_group, self.cpus_per_rank = placement_group, cpus_per_rank
        self.name = name  # actors are named NAME-rankR (a replacement: NAME-rankR-K), as Ray's dashboard shows them
        # every worker connects to it once; every group forms through it (execution.rendezvous)
        self.rendezvous = RunStore(reachable_ip(ray.get_runtime_context().gcs_address))
        self.env = env
        self.start_timeout_s = start_timeout_s
        # slot per global rank: (node index, local index)
        self.slots = [(i, j) for i, node in enumerate(inv.nodes) for j in range(node.ranks)]
        self.workers: list[Worker | None] = [None] * len(self.slots)
        self.devices: list[tuple[str, int] | None] = [None] * len(self.slots)  # (CUDA_VISIBLE_DEVICES, index)
        self.respawns = 0
        self._replaced = [0] * len(self.slots)  # per slot, how many workers replaced its first one
        self.dead_nodes: set[str] = set()
        self._bundle = _bundle_per_slot(inv, self.slots, placement_group) if placement_group is not None else None

    def actor(self, rank: int) -> ActorHandle | None:
        worker = self.workers[rank]
        return worker.actor if worker is not None else None

    def infos(self) -> list[WorkerInfo]:
        """What every worker said about itself, by rank."""
        return [w.info for w in self.workers if w is not None]

    def start(self) -> None:
        self._spawn(range(len(self.slots)), first=True)

    def refresh_nodes(self) -> set[str]:
        """Node ids of the inventory that Ray no longer reports alive."""
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        self.dead_nodes = {node.node_id for node in self.inv.nodes if node.node_id not in alive}
        return self.dead_nodes

    def unavailable(self, ranks: Sequence[int]) -> str | None:
        """Why these ranks cannot run now (a node gone at the last refresh, a worker that could
        not be replaced), or None."""
        gone = sorted({self.node_of(r).ip for r in ranks if self.node_of(r).node_id in self.dead_nodes})
        if gone:
            return f"node(s) {', '.join(gone)} left the cluster"
        missing = [r for r in ranks if self.actor(r) is None]
        if missing:
            return f"no worker for rank(s) {','.join(map(str, missing))} (it could not be replaced)"
        return None

    def node_of(self, rank: int) -> Node:
        return self.inv.nodes[self.slots[rank][0]]

    def respawn(self, ranks: list[int]) -> None:
        """Kill the actors of `ranks` (if alive) and start fresh ones in the same slots; slots
        on nodes that are gone stay empty."""
        for r in ranks:
            self._kill(r)
        self.refresh_nodes()
        live = [r for r in ranks if self.node_of(r).node_id not in self.dead_nodes]
        self.respawns += len(live)
        for r in live:
            self._replaced[r] += 1
        self._spawn(live)

    def shutdown(self) -> None:
        for r in range(len(self.workers)):
            self._kill(r)
        self.rendezvous.close()  # its thread and port: watch starts a pool every cycle

    def _kill(self, rank: int) -> None:
        worker = self.workers[rank]
        if worker is not None and worker.actor is not None:
            ray.kill(worker.actor, no_restart=True)
            self.workers[rank] = dataclasses.replace(worker, actor=None)

    def _spawn(self, ranks, first: bool = False) -> None:
        """Start workers for `ranks`. Slots whose worker did not start are left empty (None)
        and reported in one PlacementError after the others are set up."""
        ranks = list(ranks)
        use_gpus = self.inv.use_gpus
        # "ctl": a thread of its own that answers ping() while a collective blocks the default one
        cls = ray.remote(concurrency_groups={"ctl": 1})(BenchWorker)
        actors = {}
        for r in ranks:
            node = self.node_of(r)
            # --env goes in the actor's runtime_env: set before the process starts, shown by Ray
            actors[r] = cls.options(
                name=f"{self.name}-rank{r}" + (f"-{self._replaced[r]}" if self._replaced[r] else ""),
                num_cpus=0 if use_gpus else self.cpus_per_rank,
                num_gpus=1 if use_gpus else 0,
                max_restarts=0,
                scheduling_strategy=self._where(r, node),
                runtime_env={"env_vars": dict(self.env)} if self.env else None,
            ).remote(node.ip)
        refs = {actors[r].describe.remote(): r for r in ranks}
        ready, pending = ray.wait(list(refs), num_returns=len(refs), timeout=self.start_timeout_s)
        failed = {refs[p]: f"did not start within {self.start_timeout_s:.0f}s" for p in pending}
        for ref in ready:
            r = refs[ref]
            try:
                self.workers[r] = Worker(actors[r], ray.get(ref, timeout=self.start_timeout_s))
            except Exception as e:  # an actor that died while starting
                failed[r] = f"failed to start ({first_line(e)})"
        for r in failed:
            ray.kill(actors[r], no_restart=True)
        started = [r for r in ranks if r not in failed]
        if use_gpus and started:
            self._assign_gpus(started, first)
        self._connect(started)
        self._check_nodes(started)
        if failed:
            where = sorted({f"{self.node_of(r).ip} ({self.node_of(r).hostname or '?'})" for r in failed})
            reasons = sorted(set(failed.values()))
            raise PlacementError(
                f"{len(failed)} worker(s) on node(s) {', '.join(where)}: {'; '.join(reasons)}"
            )

    def _where(self, rank: int, node: Node):
        if self._bundle is None:
            return NodeAffinitySchedulingStrategy(node.node_id, soft=False)
        return PlacementGroupSchedulingStrategy(self.placement_group, placement_group_bundle_index=self._bundle[rank])

    def _assign_gpus(self, ranks: list[int], first: bool) -> None:
        """Every worker of a node sees all of the node's GPUs (CUDA_VISIBLE_DEVICES, the union of
        what Ray gave them) and uses one by its index there. At the first start each node's ranks
        are ordered by GPU id (rank order = local device order) and each slot keeps its device
        for the whole run: a replacement worker uses its slot's device, whichever GPU Ray gave it,
        so a group stays on the devices (and the rails) it was planned on."""
        if first:
            by_node: dict[int, list[int]] = {}
            for r in ranks:
                by_node.setdefault(self.slots[r][0], []).append(r)
            for members in by_node.values():
                ordered = sorted((self.workers[r] for r in members),
                                 key=lambda w: _gpu_key(w.info.gpu_ids[0], w.info.gpu_bus))
                for r, worker in zip(members, ordered):
                    self.workers[r] = worker
                try:
                    visible, index = gpu_assignment([self.workers[r].info.gpu_ids[0] for r in members],
                                                    [self.workers[r].info.gpu_bus for r in members])
                except ValueError as e:
                    node = self.inv.nodes[self.slots[members[0]][0]]
                    raise PlacementError(f"node {node.hostname} ({node.ip}): {e}") from None
                for r, i in zip(members, index):
                    self.devices[r] = (visible, i)
        refs = {self.actor(r).use_gpu.remote(*self.devices[r]): r for r in ranks}
        try:
            infos = ray.get(list(refs), timeout=self.start_timeout_s)
        except Exception as e:
            raise PlacementError(f"could not set the GPUs of new workers: {first_line(e)}") from None
        for r, info in zip(refs.values(), infos):
            self.workers[r] = Worker(self.workers[r].actor, info)

    def silent(self, ranks: Sequence[int], timeout_s: float = 3.0) -> list[int]:
        """Which of these ranks' processes do not answer a ping within `timeout_s` (stopped,
        dead, or stuck outside Python with the GIL held); the others are alive."""
        refs = {self.actor(r).ping.options(concurrency_group="ctl").remote(): r for r in ranks
                if self.actor(r) is not None}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
        answered = set()
        for ref in ready:
            try:
                ray.get(ref, timeout=0)
                answered.add(refs[ref])
            except Exception:  # died
                pass
        return [r for r in ranks if r not in answered]

    def _connect(self, ranks: list[int]) -> None:
        ip, port = self.rendezvous.address
        refs = [self.actor(r).connect_store.remote(ip, port, self.start_timeout_s) for r in ranks]
        try:
            ray.get(refs, timeout=self.start_timeout_s)
        except Exception as e:
            raise PlacementError(f"workers could not reach the run's rendezvous store at {ip}:{port}: "
                                 f"{first_line(e)}") from None

    def _check_nodes(self, ranks: list[int]) -> None:
        for r in ranks:
            want = self.inv.nodes[self.slots[r][0]].node_id
            got = self.workers[r].info.node_id
            if got != want:
                raise PlacementError(f"rank {r} started on node {got}, not on its node {want}")
