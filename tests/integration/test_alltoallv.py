"""all_to_allv on a real (shared) Ray instance, gloo: a seeded MoE router's matrix, every cell
checked on every rank, rows that record the matrix and count the busiest rank's bytes as
nccl-tests' alltoallv does, the report's table; a bad --traffic refused before anything is written."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from orchestrator.analysis import alltoallv
from orchestrator.sweep import traffic as tv
from tests.helpers import run_cli
from workloads import traffic

MOE = "moe:experts=12,topk=2,skew=1.5,seed=3"


def test_a_moe_all_to_allv_is_exact_and_its_rows_say_which_matrix_and_bytes(ray_head, tmp_path):
    out = tmp_path / "results"
    proc = run_cli(["run", "--collectives", "all_to_allv", "--traffic", MOE, "--patterns", "intra",
                    "--ranks-per-node", "3", "-b", "1K", "-e", "64K", "-f", "8", "-n", "3", "-c", "2",
                    "--output", str(out)], env=ray_head.env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    df = pd.read_parquet(out)
    assert set(df.collective) == {"all_to_allv"} and (df.status == "ok").all() and (df.n_wrong == 0).all()
    assert (df.traffic_source == MOE).all()
    for r in df.itertuples():
        m = tv.parse(MOE).for_ranks(r.world_size)  # each group size its own matrix
        assert r.traffic_digest == traffic.digest(m)
        count = r.msg_bytes // 4
        cells = traffic.counts(m, count)
        assert r.traffic_busiest_bytes == traffic.busiest_numel(m, count) * 4 <= r.msg_bytes
        assert r.traffic_total_bytes == sum(map(sum, cells)) * 4
        # nccl-tests' alltoallv: busbw = the busiest rank's bytes / time x (n-1)/n
        n = r.world_size
        assert r.busbw_gbps == pytest.approx(r.traffic_busiest_bytes / r.time_us / 1e3 * (n - 1) / n)
    assert 3 in set(df.world_size)
    for _, g in df.groupby("group_id"):
        assert sorted(g.msg_bytes) == [1024, 8192, 65536]
    rep = json.loads(run_cli(["report", str(out), "--format", "json"]).stdout)
    table = rep["tables"]["all_to_allv"]
    assert len(table) == df.group_id.nunique()  # one row per group, at its largest size
    for row in table:
        assert tuple(row) == alltoallv.COLUMNS  # the declared header of an empty table
        assert row["msg_bytes"] == 65536 and MOE in row["traffic"] and row["busiest_rank"].startswith("rank ")
        assert " -> " in row["heaviest_pair"] and "the median rank's rate" in row["slowest_rank_for_its_bytes"]


@pytest.mark.parametrize("args, said", [
    (["--traffic", "moe:experts=4,topk=5"], "--traffic moe:experts=4,topk=5: topk=5 must be between 1 and experts"),
    (["--collectives", "all_reduce", "--traffic", "moe"], "only all_to_allv takes a traffic matrix"),
])
def test_a_bad_traffic_is_refused_in_one_line_and_nothing_is_written(ray_head, tmp_path, args, said):
    out = tmp_path / "results"
    base = ["run", "--collectives", "all_to_allv"] if "--collectives" not in args else ["run"]
    proc = run_cli([*base, *args, "--output", str(out)], env=ray_head.env())
    assert proc.returncode == 2 and said in proc.stderr.strip().splitlines()[-1], proc.stderr[-2000:]
    assert not out.exists() or not list(out.rglob("*.parquet"))


def test_a_matrix_file_smaller_than_a_group_is_refused_before_the_run(ray_head, tmp_path):
    (tmp_path / "m.txt").write_text("100 200\n50 100\n")
    out = tmp_path / "results"
    proc = run_cli(["run", "--collectives", "all_to_allv", "--traffic", str(tmp_path / "m.txt"), "--patterns",
                    "intra", "--ranks-per-node", "3", "--output", str(out)], env=ray_head.env())
    assert proc.returncode == 2 and "a 2x2 matrix, and the plan has a group of 3 ranks" in proc.stderr
    assert not out.exists() or not list(out.rglob("*.parquet"))
