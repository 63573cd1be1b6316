"""NVLink domains on a Ray cluster of fake GPU nodes (issue 33): the probe task on each node reads
the node's domain, the inventory groups the nodes, the domain pattern plans one group of them,
and its rows say intra-domain while a group that leaves the domain stays inter.

A fake GPU node has no nvidia-smi: each node's `nvidia-smi -q` is a recorded output (the probe's
test-only $COLLBENCH_TEST_NVIDIA_SMI_Q_DIR, one file per Ray node id). Two nodes get the MNNVL
node's Fabric section (tests/fixtures/nvidia_smi), the third an HGX H100's (no domain). The same
workers keep a record of what touches CUDA and when (workloads.cuda_order): nothing before the mask."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
import ray
from ray.cluster_utils import Cluster

from orchestrator.execution import probe
from orchestrator.execution.outcome import Tally
from orchestrator.execution.pool import ActorPool
from orchestrator.execution.rows import RunRef
from orchestrator.execution.runner import Runner
from orchestrator.results.store import ResultStore
from orchestrator.sweep.inventory import from_ray_nodes, with_domains
from orchestrator.sweep.planner import make_plan
from orchestrator.sweep.spec import SweepSpec
from workloads import cuda_order

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia_smi"
DOMAIN = "dc6e40c4-d722-4357-9ba6-5291dd461278/2"


@pytest.fixture(scope="module")
def recorded_cluster(tmp_path_factory):
    recorded = tmp_path_factory.mktemp("smi")
    os.environ[probe.RECORDED_SMI_Q_DIR] = str(recorded)  # before the nodes start: their processes inherit it
    os.environ[cuda_order.ENV] = str(recorded / "cuda_order.txt")  # what touches CUDA in each worker, and when
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0, "include_dashboard": False})
    try:
        for _ in range(3):
            cluster.add_node(num_cpus=1, num_gpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address)
        yield recorded
    finally:
        ray.shutdown()
        cluster.shutdown()
        del os.environ[probe.RECORDED_SMI_Q_DIR], os.environ[cuda_order.ENV]


def test_the_probe_reads_domains_and_a_domain_group_is_intra_domain(recorded_cluster, tmp_path):
    inv = from_ray_nodes(ray.nodes(), ranks_per_node=1)
    assert len(inv.nodes) == 3 and inv.use_gpus and inv.domains() == {}
    for node in inv.nodes[:2]:
        shutil.copy(FIXTURES / "mnnvl_fabric_unhealthy_clique2.txt", recorded_cluster / f"{node.node_id}.txt")
    shutil.copy(FIXTURES / "h100_fabric_completed_zero_uuid_560.txt", recorded_cluster / f"{inv.nodes[2].node_id}.txt")

    probes = probe.probe_nodes(inv, with_nccl=False)
    assert [probes[n.node_id].nvlink_domain for n in inv.nodes] == [DOMAIN, DOMAIN, None]
    inv = with_domains(inv, {nid: p.nvlink_domain for nid, p in probes.items() if p.nvlink_domain})
    assert inv.domains() == {DOMAIN: [0, 1]}

    spec = SweepSpec(collectives=("all_reduce",), min_bytes=64, max_bytes=64, iters=2, warmup=1,
                     patterns=("domain", "inter"), output=str(tmp_path))
    plan = make_plan(spec, inv)
    assert [(g.pattern, g.ranks) for g in plan.groups] == [("domain", (0, 1)), ("inter", (0, 1)), ("inter", (0, 1, 2))]
    pool = ActorPool(inv, {}, start_timeout_s=120)
    pool.start()
    try:
        store = ResultStore(str(tmp_path), "run-d")
        store.create()
        outcome = Tally()
        # gloo on fake GPU nodes: the rows' topology is what is checked, not NVLink
        Runner(spec, pool, store, "gloo", RunRef("run-d", dt.datetime.now(dt.timezone.utc)), [outcome], {}).run(plan)
    finally:
        pool.shutdown()
    assert outcome.groups_ok == len(plan) == 3 and outcome.groups_failed == 0
    df = pd.read_parquet(tmp_path).sort_values("group_id")
    assert list(zip(df.pattern, df.world_size, df.topology)) == [
        ("domain", 2, "intra-domain"), ("inter", 2, "intra-domain"), ("inter", 3, "inter")]
    assert (df.status == "ok").all() and (df.n_wrong == 0).all()
    # every GPU worker set its mask before anything asked CUDA for devices (issue 56; on a real GPU a
    # touch before it would leave cuda:i on another GPU, or none): the record has each worker's first
    # touch (is_available, CPU torch here) after its mask, and none before
    record = (recorded_cluster / "cuda_order.txt").read_text().splitlines()
    assert len({line.split()[0] for line in record if line.endswith(" is_available masked")}) == 3, record
    assert cuda_order.touched_before_mask(str(recorded_cluster / "cuda_order.txt")) == []
