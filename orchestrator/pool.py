"""ActorPool: one BenchWorker actor per rank, pinned to its node, created once, respawned on
failure. It owns every Ray wait on actor start-up and its timeout."""

from __future__ import annotations

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from orchestrator.inventory import Inventory
from workloads.worker import BenchWorker


class PlacementError(RuntimeError):
    """Actors did not start on their nodes in time; the message names the nodes."""


def gpu_assignment(gpu_ids: list[str]) -> tuple[str, list[int]]:
    """The actors of one node share visibility of all their GPUs and each uses its own.

    gpu_ids: the GPU id Ray gave each actor of the node. Returns the CUDA_VISIBLE_DEVICES value
    (the union, sorted numerically) and each actor's index into it.
    """
    union = sorted(set(gpu_ids), key=lambda g: (len(g), g))
    return ",".join(union), [union.index(g) for g in gpu_ids]


class ActorPool:
    def __init__(self, inv: Inventory, env: dict[str, str], start_timeout_s: float) -> None:
        self.inv = inv
        self.env = env
        self.start_timeout_s = start_timeout_s
        # slot per global rank: (node index, local index)
        self.slots = [(i, j) for i, node in enumerate(inv.nodes) for j in range(node.ranks)]
        self.actors: list = [None] * len(self.slots)
        self.info: list[dict] = [{}] * len(self.slots)
        self.respawns = 0
        self.dead_nodes: set[str] = set()

    def start(self) -> None:
        self._spawn(range(len(self.slots)))

    def refresh_nodes(self) -> set[str]:
        """Node ids of the inventory that Ray no longer reports alive."""
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        self.dead_nodes = {node.node_id for node in self.inv.nodes if node.node_id not in alive}
        return self.dead_nodes

    def node_of(self, rank: int):
        return self.inv.nodes[self.slots[rank][0]]

    def respawn(self, ranks: list[int]) -> None:
        """Kill the actors of `ranks` (if alive) and start fresh ones in the same slots; slots
        on nodes that are gone stay empty."""
        for r in ranks:
            if self.actors[r] is not None:
                ray.kill(self.actors[r], no_restart=True)
                self.actors[r] = None
        self.refresh_nodes()
        live = [r for r in ranks if self.node_of(r).node_id not in self.dead_nodes]
        self.respawns += len(live)
        self._spawn(live)

    def shutdown(self) -> None:
        for i, actor in enumerate(self.actors):
            if actor is not None:
                ray.kill(actor, no_restart=True)
                self.actors[i] = None

    def _spawn(self, ranks) -> None:
        ranks = list(ranks)
        use_gpus = self.inv.use_gpus
        cls = ray.remote(BenchWorker)
        for r in ranks:
            node = self.inv.nodes[self.slots[r][0]]
            self.actors[r] = cls.options(
                num_cpus=0,
                num_gpus=1 if use_gpus else 0,
                max_restarts=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False),
            ).remote(self.env, node.ip)
        refs = {self.actors[r].describe.remote(): r for r in ranks}
        ready, pending = ray.wait(list(refs), num_returns=len(refs), timeout=self.start_timeout_s)
        if pending:
            missing = sorted({self.inv.nodes[self.slots[refs[p]][0]].hostname or "?" for p in pending})
            nodes = sorted({self.inv.nodes[self.slots[refs[p]][0]].ip for p in pending})
            raise PlacementError(
                f"{len(pending)} worker(s) did not start within {self.start_timeout_s:.0f}s on node(s) "
                f"{', '.join(nodes)} ({', '.join(missing)})"
            )
        for ref in ready:
            r = refs[ref]
            try:
                self.info[r] = ray.get(ref, timeout=self.start_timeout_s)
            except Exception as e:  # an actor that died while starting
                node = self.inv.nodes[self.slots[r][0]]
                raise PlacementError(f"worker for rank {r} on node {node.ip} failed to start: {e}") from None
        if use_gpus:
            self._assign_gpus(ranks)
        self._check_nodes(ranks)

    def _assign_gpus(self, ranks: list[int]) -> None:
        by_node: dict[int, list[int]] = {}
        for r, (node, _) in enumerate(self.slots):
            by_node.setdefault(node, []).append(r)
        touched = {self.slots[r][0] for r in ranks}
        refs = []
        for node in touched:
            members = by_node[node]
            # Keep rank order = local device order: sort the node's actors by their GPU id.
            ordered = sorted(members, key=lambda r: (len(self.info[r]["gpu_ids"][0]), self.info[r]["gpu_ids"][0]))
            actors = [self.actors[r] for r in ordered]
            infos = [self.info[r] for r in ordered]
            for r, actor, info in zip(members, actors, infos):
                self.actors[r], self.info[r] = actor, info
            visible, index = gpu_assignment([self.info[r]["gpu_ids"][0] for r in members])
            refs += [self.actors[r].use_gpu.remote(visible, i) for r, i in zip(members, index)]
        ray.get(refs, timeout=self.start_timeout_s)

    def _check_nodes(self, ranks: list[int]) -> None:
        for r in ranks:
            want = self.inv.nodes[self.slots[r][0]].node_id
            got = self.info[r]["node_id"]
            if got != want:
                raise PlacementError(f"rank {r} started on node {got}, not on its node {want}")
