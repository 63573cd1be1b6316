"""`collbench replay` of recorded Flight Recorder dumps on a real (shared) Ray instance, gloo: the
ops as the trace has them, read back from disk; the report's per-step tables; `predict --trace`
beside the replay, from fits known exactly; bad input refused before anything is written."""

from __future__ import annotations

import json
import os
import re

import pandas as pd
import pytest

from orchestrator.sweep import trace
from tests import synthetic
from tests.helpers import run_cli
from workloads import registry

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "flight_recorder")


def test_replay_of_a_tp_dp_job_writes_each_op_where_the_job_ran_it_and_predict_prices_it(ray_head, tmp_path):
    out = tmp_path / "results"
    dumps = os.path.join(FIXTURES, "tp_dp")
    # one node of 4 ranks: by default the trace's ranks per node are the cluster's
    proc = run_cli(["replay", dumps, "--ranks-per-node", "4", "--repeat", "2", "--output", str(out)],
                   env=ray_head.env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "4 op(s) per step, 4 steps" in proc.stdout
    replay_run = re.search(r"collbench: run (\S+)", proc.stdout).group(1)
    df = pd.read_parquet(out)
    loaded = trace.load([dumps])
    assert (df.pattern == "replay").all() and (df.status == "ok").all()
    # 2 repeats x 4 steps x (2 TP groups x 2 all_reduces + 2 DP groups x (all_reduce + all_gather))
    assert len(df) == 2 * 4 * 8 and sorted(df.step.unique()) == list(range(8))
    traced = {(loaded.group_label(o.group), o.seq, o.kind, o.msg_bytes) for ops in loaded.ops.values() for o in ops}
    assert {(r.process_group, r.seq, r.collective, r.msg_bytes) for r in df.itertuples()} == traced  # op for op
    assert set(map(tuple, df[df.process_group == "1"].ranks)) == {(0, 1)}  # trace ranks 0, 1 on cluster ranks 0, 1
    assert (df.time_us > 0).all() and df.busbw_gbps.notna().all()
    rep = json.loads(run_cli(["report", str(out), "--format", "json"]).stdout)
    steps = rep["tables"]["replay_steps"]
    assert [s["step"] for s in steps] == list(range(8)) and all(s["ops"] == 8 for s in steps)
    assert sum(g["share"] for g in rep["tables"]["replay_groups"]) > 0.99  # the slowest rank's two groups
    # predict from a sweep of the same collectives beside the replay: synthetic, so that its fits and
    # hence the prediction are known exactly (a real sweep on this shared host may fail the fit)
    alpha_us, gbps = 20.0, 10.0
    for coll in ("all_reduce", "all_gather"):
        synthetic.write_cluster_run(str(out), "sweep", nodes=1, ranks_per_node=4, patterns=("intra-pairwise",),
                                    intra_gbps=gbps, alpha_us=alpha_us, collective=coll, file_suffix=coll)
    pred = run_cli(["predict", str(out), "--run", "sweep", "--trace", dumps, "--ranks-per-node", "4",
                    "--replay-run", replay_run, "--format", "json"])
    assert pred.returncode == 0, pred.stderr[-2000:]
    summary = json.loads(pred.stdout)["tables"]["summary"][0]
    assert summary["steps"] == 4 and summary["replayed_ms_per_step"] > 0
    # every traced group holds 2 ranks of one node: each op costs alpha + S / algbw(2), the slowest
    # rank's sum per step (every step alike)
    program, _ = trace.program(loaded, trace.find_steps(loaded.ops[0], None), gaps=False)
    per_rank_us = [sum(alpha_us + op.msg_bytes * registry.get(op.kind).busbw_factor(2) / (gbps * 1e3)
                       for op in ops if op.step == 0) for ops in program.ops]
    assert summary["predicted_ms_per_step"] == pytest.approx(max(per_rank_us) / 1e3, rel=0.02)
    assert summary["predicted/replayed"] == pytest.approx(summary["predicted_ms_per_step"]
                                                          / summary["replayed_ms_per_step"])
    # a sweep without all_gather prices what it can and names what it cannot
    synthetic.write_cluster_run(str(out), "only_ar", nodes=1, ranks_per_node=4, patterns=("intra-pairwise",),
                                collective="all_reduce")
    pred = run_cli(["predict", str(out), "--run", "only_ar", "--trace", dumps, "--ranks-per-node", "4"])
    assert pred.returncode == 1 and "without an accepted fit: all_gather on" in pred.stderr, pred.stderr[-2000:]


def test_replay_refuses_bad_input_in_one_line_and_writes_nothing(ray_head, tmp_path):
    out = tmp_path / "results"
    for args, said in [
        ([str(tmp_path / "nothing")], "nothing: no such file or folder"),
        ([os.path.join(FIXTURES, "ddp"), "--repeat", "0"], "--repeat 0: must be between 1 and 1000"),
        ([os.path.join(FIXTURES, "ddp"), "--ops-per-step", "999"], "--ops-per-step 999"),
        ([os.path.join(FIXTURES, "tp_dp"), "--trace-ranks-per-node", "1", "--ranks-per-node", "2"],
         "the trace has 4 rank(s), 1 per node: it needs 4 node(s), the cluster has 1"),
    ]:
        proc = run_cli(["replay", *args, "--output", str(out)], env=ray_head.env())
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and said in lines[-1] and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        assert not out.exists() or not [p for p in out.rglob("*.parquet")]
