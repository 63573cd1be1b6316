"""Placement on a Ray cluster with fake GPU nodes: one actor per GPU, on its node, seeing all of
its node's GPUs, and reused by every group of a multi-pattern plan."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest
import ray
from ray.cluster_utils import Cluster

from orchestrator.execution.outcome import Tally
from orchestrator.execution.pool import ActorPool
from orchestrator.execution.rows import RunRef
from orchestrator.execution.runner import Runner
from orchestrator.results.store import ResultStore
from orchestrator.sweep.inventory import from_ray_nodes
from orchestrator.sweep.planner import make_plan
from orchestrator.sweep.spec import SweepSpec


@pytest.fixture(scope="module")
def gpu_cluster():
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0, "include_dashboard": False})
    for _ in range(2):
        cluster.add_node(num_cpus=2, num_gpus=2)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def test_one_actor_per_gpu_on_its_node_reused_across_groups(gpu_cluster, tmp_path):
    inv = from_ray_nodes(ray.nodes(), ranks_per_node=5)
    assert len(inv.nodes) == 2 and inv.world_size == 4 and inv.use_gpus  # the GPU-less head holds none
    pool = ActorPool(inv, {"NCCL_DEBUG": "WARN", "NCCL_ALGO": "Ring"}, start_timeout_s=120)
    pool.start()
    handles = [w.actor for w in pool.workers]
    pids = [i.pid for i in pool.infos()]
    for rank, (node_index, _) in enumerate(pool.slots):
        assert pool.workers[rank].info.node_id == inv.nodes[node_index].node_id
    envs = ray.get([h.describe.remote() for h in handles])
    for node_index in range(2):
        members = [r for r, (n, _) in enumerate(pool.slots) if n == node_index]
        assert sorted(g for r in members for g in pool.workers[r].info.gpu_ids) == ["0", "1"]
        # every actor of a node sees both GPUs (for NVLink/P2P) and keeps its own index
        assert all(envs[r].comm_env["CUDA_VISIBLE_DEVICES"] == "0,1" for r in members)
        assert sorted(envs[r].device_index for r in members) == [0, 1]
        # --env passes through; NCCL logs INFO of INIT, NET, GRAPH to a file (transport columns)
        assert all(envs[r].comm_env["NCCL_ALGO"] == "Ring" for r in members)
        assert all(envs[r].comm_env["NCCL_DEBUG"] == "INFO" for r in members)
        assert all(envs[r].comm_env["NCCL_DEBUG_SUBSYS"] == "INIT,NET,GRAPH,ENV,REG" for r in members)

    spec = SweepSpec(collectives=("all_reduce",), min_bytes=64, max_bytes=64, iters=2, warmup=1,
                     patterns=("intra", "inter", "mixed", "pairwise"), output=str(tmp_path))
    plan = make_plan(spec, inv)
    assert len(plan.rounds) == 4  # intra(2), inter(2 rails), mixed, pairwise
    store = ResultStore(str(tmp_path), "run-x")
    store.create()
    now = dt.datetime.now(dt.timezone.utc)
    # gloo on GPU nodes measures host memory: this machine has no real GPU behind the fake ones.
    outcome = Tally()
    Runner(spec, pool, store, "gloo", RunRef("run-x", now), [outcome], {}).run(plan)
    assert outcome.groups_failed == 0 and outcome.groups_ok == len(plan) and outcome.rows == len(plan)
    assert [w.actor for w in pool.workers] == handles and pool.respawns == 0
    assert [i.pid for i in ray.get([h.describe.remote() for h in handles])] == pids
    df = pd.read_parquet(tmp_path)
    assert (df.status == "ok").all() and (df.n_wrong == 0).all()
    node_of = {r: inv.nodes[n].node_id for r, (n, _) in enumerate(pool.slots)}
    for _, row in df.iterrows():
        assert list(row.node_ids) == [node_of[r] for r in row.ranks]
        want = "intra" if len(set(row.node_ids)) == 1 else "inter" if len(set(row.node_ids)) == len(row.ranks) else "mixed"
        assert row.topology == want
    assert set(df.topology) == {"intra", "inter", "mixed"}
    assert list(df.pattern.unique()) == ["intra", "inter", "mixed", "pairwise"]
    # gloo's sockets use the interface holding the node's address (every fake node shares it)
    assert set(df.net_transport) == {"gloo/tcp/" + pool.workers[0].info.comm_env["GLOO_SOCKET_IFNAME"]}
    assert df.nccl_version.isna().all() and df.gpu_model.isna().all() and df.intra_transport.isna().all()

    # Replacement workers keep their slot's device, whichever GPU Ray gives them: a rail stays a rail.
    before = {r: (w.info.comm_env["CUDA_VISIBLE_DEVICES"], w.info.device_index) for r, w in enumerate(pool.workers)}
    node0 = [r for r, (n, _) in enumerate(pool.slots) if n == 0]
    pool.respawn(list(reversed(node0)))
    fresh = ray.get([pool.actor(r).describe.remote() for r in range(len(pool.slots))])
    assert all(fresh[r].pid != pids[r] for r in node0) and pool.respawns == len(node0)
    assert {r: (i.comm_env["CUDA_VISIBLE_DEVICES"], i.device_index) for r, i in enumerate(fresh)} == before
    assert [pool.workers[r].info.device_index for r in range(len(pool.slots))] == [before[r][1] for r in before]
    pool.shutdown()
