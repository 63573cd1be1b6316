"""Full `collbench run` sweeps on a real (shared) Ray instance, results read back from disk."""

from __future__ import annotations

import json
import os
import re

import pandas as pd
import pytest

from orchestrator.results import dataset
from orchestrator.sweep.spec import DEFAULT_COLLECTIVES
from tests.faults import worker_pids
from tests.helpers import run_cli, stand_in
from workloads import registry
from workloads.dtypes import BACKEND_DTYPES, NO_OP, OPS


def test_full_sweep_every_collective_dtype_and_op(ray_head, tmp_path):
    out = tmp_path / "results"
    dtypes = sorted(BACKEND_DTYPES["gloo"])
    proc = run_cli(
        ["run", "--output", str(out), "--ranks-per-node", "3", "--dtypes", ",".join(dtypes),
         "--op", ",".join(OPS), "-b", "96", "-e", "768", "-f", "8", "-n", "3", "-w", "1", "-c", "2"],
        env=ray_head.env(),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    df = pd.read_parquet(out)
    # intra on one node of 3 ranks: a group of 2 and a group of 3
    assert sorted(df["world_size"].unique()) == [2, 3]
    expected_cases = 0
    for name in DEFAULT_COLLECTIVES:  # every collective but all_to_allv (its own choice: --traffic)
        coll = registry.get(name)
        expected_cases += len(dtypes) * (len(OPS) if coll.reduces else 1) * len(coll.in_place_modes)
    # 2 sizes (96, 768 bytes) per case, for each of the two groups
    assert len(df) == expected_cases * 2 * 2
    assert (df["status"] == "ok").all()
    assert (df["n_wrong"] == 0).all()
    assert (df["busbw_gbps"] > 0).all() and (df["algbw_gbps"] > 0).all()
    assert set(df["collective"]) == set(DEFAULT_COLLECTIVES) == set(registry.names()) - {"all_to_allv"}
    assert set(df["dtype"]) == set(dtypes)
    assert set(df.loc[df["collective"] == "all_reduce", "op"]) == set(OPS)
    assert set(df.loc[df["collective"] == "all_gather", "op"]) == {NO_OP}
    assert set(df.loc[df["collective"] == "reduce_scatter", "in_place"]) == {True, False}
    # all_gather of 3 ranks rounds 96 bytes of float32 (24 elements) to 8 per rank: stays 96
    ag = df[(df.collective == "all_gather") & (df.world_size == 3) & (df.dtype == "float32")]
    assert sorted(ag["msg_bytes"].unique()) == [96, 768]
    # busbw = algbw * factor, and algbw = msg_bytes / time
    ar = df[df.collective == "all_reduce"]
    assert ((ar.algbw_gbps * 1e3 * ar.time_us - ar.msg_bytes).abs() < 1e-6 * ar.msg_bytes).all()
    factor = ar.world_size.map(lambda n: 2 * (n - 1) / n)
    assert ((ar.busbw_gbps - ar.algbw_gbps * factor).abs() < 1e-9).all()
    assert all(len(x) == 3 for x in df["iter_time_us"]) and all(
        len(x) == n for x, n in zip(df["rank_time_us"], df["world_size"])
    )
    assert (df["time_us"] >= df["time_us_min"]).all() and (df["time_us_max"] >= df["time_us"]).all()
    assert set(df["topology"]) == {"intra"} and set(df["backend"]) == {"gloo"}
    # each group's communicator timed (comm_ops_perf's figures): one value per group, in every row of
    # it; forming and destroying a gloo group of 2-3 local ranks takes well under its group timeout
    per_group = df.groupby("group_id")[["comm_init_s", "comm_destroy_s"]].nunique()
    assert (per_group == 1).all(axis=None), per_group
    assert df.comm_init_s.between(0, 300).all() and df.comm_destroy_s.between(0, 300).all()
    assert (df.comm_init_s > 0).all() and (df.comm_destroy_s > 0).all()
    # each worker measured gloo's dispatch floor (a one-rank all_reduce) as it started; every row says
    # whether its call took less than 1.5x its group's (the slowest rank's) floor
    assert (df.dispatch_floor_us > 0).all() and (df.groupby("group_id").dispatch_floor_us.nunique() == 1).all()
    assert (df.dispatch_bound == (df.time_us < 1.5 * df.dispatch_floor_us)).all()
    # the table printed while it ran
    assert "all_reduce" in proc.stdout and "reduce_scatter" in proc.stdout and "#wrong" not in proc.stderr
    manifest = dataset.manifest(str(out), df["run_id"].iloc[0])
    assert manifest["state"] == "finished" and manifest["run_id"] == df["run_id"].iloc[0]
    assert manifest["torch_version"].startswith("2.") and manifest["groups_done"] == 2
    # the empty-call floor (the same batch loop dispatching nothing): far below any gloo collective's batch
    assert 0 < manifest["batch_floor_us"] < df["time_us_batch"].min()
    assert manifest["dispatch_floor_us"] == df.dispatch_floor_us.max()  # the largest of any worker
    # the ranks measured at nice 0 (collbench starts Ray's workers so: Ray's default is 15)
    assert manifest["worker_niceness"] == 0 and "nice" not in proc.stderr


def test_one_rank_group_runs_end_to_end(ray_head, tmp_path):
    """What a one-GPU machine runs: a group of one rank, every collective that needs no peer. The
    driver never imports torch (it measures nothing; execution.store_server serves the rendezvous):
    Python's own import log of the driver's process names no torch module."""
    out = tmp_path / "results"
    proc = run_cli(["run", "--output", str(out), "--ranks-per-node", "1", "-b", "1K", "-e", "4K", "-n", "2"],
                   env={**ray_head.env(), "PYTHONPROFILEIMPORTTIME": "1"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    imported = re.findall(r"^import time:.*\|\s+(\S+)$", proc.stderr, re.M)
    assert "ray" in imported and "pandas" in imported  # the log is read
    assert not [m for m in imported if m == "torch" or m.startswith("torch.")], "the driver imported torch"
    df = pd.read_parquet(out)
    assert set(df.world_size) == {1} and (df.status == "ok").all() and (df.n_wrong == 0).all()
    assert set(df.collective) == set(DEFAULT_COLLECTIVES) - {"send_recv"}  # send_recv needs a peer
    assert (df[df.collective == "all_reduce"].busbw_gbps == 0).all()  # factor 2(n-1)/n is 0 for one rank
    assert (df.time_us > 0).all() and (df.time_us_batch > 0).all()


JOB = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "sweep", "SLURM_JOB_PARTITION": "gpu", "SLURM_JOB_NODELIST": "slm7",
       "SLURM_JOB_NUM_NODES": "1", "SLURMD_NODENAME": "slm7"}


def test_an_embedded_run_in_a_slurm_step_at_rays_niceness(tmp_path):
    """One embedded instance started inside a Slurm step (SLURMD_NODENAME in its environment, as
    `srun ... ray start` gives each node's Ray; issue 44) where the user set Ray's own default, nice 15:
    - the rows' scheduler_nodes and the manifest name the node and the job as Slurm does;
    - the ranks measured at nice 15, and it is said;
    - no Ray line (its token-auth WARNING, its INFO) on a plain run: only collbench's own (issue 45)."""
    out, proc, df = _embedded_run(tmp_path, RAY_worker_niceness="15", **JOB)
    assert [list(s) for s in df.scheduler_nodes] == [["slm7", "slm7"]] * len(df)
    manifest = dataset.manifest(str(out), df.run_id.iloc[0])
    assert json.loads(manifest["scheduler"]) == {"scheduler": "slurm", "job_id": "4242", "job_name": "sweep",
                                                 "partition": "gpu", "nodelist": "slm7", "nodes": "1"}
    assert manifest["worker_niceness"] == 15
    assert "collbench: warning: the ranks run at nice 15 (Ray's default for its workers)" in proc.stderr
    theirs = [line for line in proc.stderr.splitlines() if not line.startswith(("collbench", "[progress]"))]
    assert theirs == [], theirs


def test_qualify_in_a_slurm_step_names_the_node_as_slurm_does_and_verbose_shows_rays_lines(tmp_path):
    """--drain inside the job: a node that passes is never drained (scontrol: a stand-in that records);
    --verbose shows Ray's own lines (its "Started a local Ray instance"), which a plain run hides."""
    (tmp_path / "bin").mkdir()
    path = stand_in(tmp_path / "bin", "scontrol") + os.pathsep + os.environ["PATH"]
    q = run_cli(["qualify", "--output", str(tmp_path / "results"), "-b", "64K", "-e", "64K", "-n", "2", "--format",
                 "json", "--drain", "--verbose"], env=_embedded_env(PATH=path, **JOB))
    assert q.returncode == 0, q.stderr[-3000:]
    said = json.loads(q.stdout)
    (verdict,) = said["nodes"]
    assert verdict["name"] == "slm7" and verdict["verdict"] == "pass"
    # one node: its probes alone, one round; the JSON and the closing line say the same count
    assert said["rounds"] == 1 and "collbench: 1 of 1 node(s) pass; 1 round(s), " in q.stderr, q.stderr[-3000:]
    assert verdict["action"] is None and verdict["drained"] is None
    # scontrol was asked for the job's switch tree (it printed none: qualify went on without one), and
    # for nothing else: no update, no drain
    calls = (tmp_path / "bin" / "calls").read_text()
    assert calls == "show\ntopology\n---\n", calls
    assert "Started a local Ray instance" in q.stderr, q.stderr[-3000:]


def _embedded_env(**extra: str) -> dict:
    """This process's environment without RAY_ADDRESS (each run starts its own instance), with `extra`."""
    return {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, **extra}


def _embedded_run(tmp_path, *args: str, **extra: str):
    """A one-size all_reduce run on an embedded instance with `args` and `extra` in its environment:
    (output, the finished process, its rows)."""
    out = tmp_path / "results"
    proc = run_cli(["run", "--output", str(out), "--collectives", "all_reduce", "-b", "1K", "-e", "1K", "-n", "2",
                    *args], env=_embedded_env(**extra))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc, pd.read_parquet(out)


@pytest.mark.parametrize(
    "config, message",
    [
        ("collectives: []\n", "--collectives: empty list"),
        ("group_sizes: [2, 7]\n", "--group-sizes 7: no intra/inter/mixed group of that many ranks"),
        ("max_bytes: 64G\n", "--max-bytes 64G: each rank needs about"),
        ("patterns: [intra, mixed]\n", "--patterns mixed: needs at least 2 nodes, the cluster has 1"),
    ],
)
def test_bad_config_for_this_cluster(ray_head, tmp_path, config, message):
    cfg = tmp_path / "sweep.yaml"
    cfg.write_text(config)
    before = set(worker_pids())  # an earlier test's workers may still be ending
    proc = run_cli(["run", "--config", str(cfg), "--output", str(tmp_path / "out")], env=ray_head.env())
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert message in lines[-1] and lines[-1].startswith("collbench: error:")
    assert not (tmp_path / "out").exists() and not set(worker_pids()) - before  # refused before any actor
