"""A real training job against its replay and its prediction, on the shared `four` lab (4 nodes,
400 mbit/s links, one rank each; at 1 gbit/s the token bucket's burst bends small sizes off a
latency-bandwidth line and the sweep's fit is refused, so `predict` cannot price the job): DDP (a 4-layer MLP, gradient
buckets) trained over gloo with the Flight Recorder on, its own communication time per step measured in the job
(benchmarks/fr_train.py), then `collbench run`, `replay` and `predict --trace` on the same lab
(benchmarks/replay_validation.py). The figures of record, 2 and 4 nodes, DDP and FSDP, are in
docs/PERFORMANCE.md; here wide bounds against the job and against the link's known rate, which a
wrong op size, count, group or placement breaks."""

from __future__ import annotations

import pandas as pd
import pytest

from benchmarks.replay_validation import validate
from orchestrator.lab import cluster as labmod

pytestmark = pytest.mark.lab
LINK_GBPS = 0.05  # 400 mbit/s


def test_replay_and_predict_of_a_ddp_job_land_near_its_own_step_time(four, tmp_path):
    row = validate(labmod.load(four.name), "ddp", str(tmp_path), steps=8, layers=4, width=512, iters=5)
    assert row["ops_per_step"] == 4 and row["complete"], row  # a bucket per layer
    # 4 buckets of 1 MB a step, a ring of 4 ranks at 50 MB/s: the job's collectives take 100-200 ms a step
    assert 0.5 < row["replay/measured"] < 2.0 and 0.5 < row["predict/measured"] < 2.0, row
    df = pd.read_parquet(tmp_path / "results-ddp-4")
    replayed = df[df.pattern == "replay"]
    assert (replayed.topology == "inter").all() and set(replayed.collective) == {"all_reduce"}
    # a 1 MB all_reduce on a ring moves its busbw over every link: the link's rate, within the shaper's burst
    assert 0.5 * LINK_GBPS < replayed.busbw_gbps.median() < 1.5 * LINK_GBPS, replayed.busbw_gbps.describe()
