"""`collbench replay` of recorded Flight Recorder dumps on a real (shared) Ray instance, gloo: the
ops as the trace has them, read back from disk; the report's per-step tables; `predict --trace`
beside the replay; bad input refused before anything is written."""

from __future__ import annotations

import json
import os
import re

import pandas as pd

from orchestrator.sweep import trace
from tests.helpers import run_cli

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
    # predict from a sweep of the same collectives beside the replay
    sweep = run_cli(["run", "--collectives", "all_reduce,all_gather", "--patterns", "intra", "--ranks-per-node", "4",
                     "-b", "4K", "-e", "256K", "-f", "4", "-n", "5", "-c", "0", "--output", str(out)],
                    env=ray_head.env())
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    sweep_run = re.search(r"collbench: run (\S+)", sweep.stdout).group(1)
    pred = run_cli(["predict", str(out), "--run", sweep_run, "--trace", dumps, "--ranks-per-node", "4",
                    "--replay-run", replay_run, "--format", "json"])
    summary = json.loads(pred.stdout)["tables"]["summary"][0]
    assert summary["steps"] == 4 and summary["replayed_ms_per_step"] > 0
    # on one node every group is intra: the fits measured cover it, or it says which sweep would
    if pred.returncode == 0:
        assert summary["predicted_ms_per_step"] > 0 and summary["predicted/replayed"] > 0
    else:
        assert "without an accepted fit" in pred.stderr


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
