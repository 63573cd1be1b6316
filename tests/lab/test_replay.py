"""A real training job against its replay and its prediction, on 2 lab nodes with shaped links:
DDP (a 4-layer MLP, gradient buckets) trained over gloo with the Flight Recorder on, its own
communication time per step measured in the job (benchmarks/fr_train.py), then `collbench run`,
`replay` and `predict --trace` on the same lab (benchmarks/replay_validation.py). The figures of
record, 2 and 4 nodes, DDP and FSDP, are in docs/PERFORMANCE.md; here wide bounds against the job
and against the link's known rate, which a wrong op size, count, group or placement breaks."""

from __future__ import annotations

import pandas as pd

from benchmarks.replay_validation import validate
from orchestrator.lab import cluster as labmod
from tests.lab.conftest import Lab, require_lab

LINK_GBPS = 0.05  # 400 Mbit/s


def test_replay_and_predict_of_a_ddp_job_land_near_its_own_step_time(tmp_path):
    require_lab()
    lab = Lab(nodes=2, ranks_per_node=1, link="400mbit", declared=False)
    try:
        row = validate(labmod.load(lab.name), "ddp", str(tmp_path), steps=8, layers=4, width=512, iters=5)
    finally:
        lab.down()
    assert row["ops_per_step"] == 4 and row["complete"], row  # a bucket per layer
    # 4 buckets of 1 MB a step at 50 MB/s: the job's collectives take 60-100 ms a step
    assert 0.5 < row["replay/measured"] < 2.0 and 0.5 < row["predict/measured"] < 2.0, row
    df = pd.read_parquet(tmp_path / "results-ddp-2")
    replayed = df[df.pattern == "replay"]
    assert (replayed.topology == "inter").all() and set(replayed.collective) == {"all_reduce"}
    # a 1 MB all_reduce of 2 ranks moves 1 MB each way: its busbw is the link's, within the shaper's burst
    assert 0.5 * LINK_GBPS < replayed.busbw_gbps.median() < 1.5 * LINK_GBPS, replayed.busbw_gbps.describe()
