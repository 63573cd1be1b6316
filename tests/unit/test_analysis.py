import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orchestrator.analysis.compare import compare
from orchestrator.analysis.fits import fit_alpha_beta
from orchestrator.results import dataset
from tests.helpers import run_main
from tests.synthetic import SIZES, write_run


def test_fit_recovers_alpha_and_bandwidth():
    sizes = np.array(SIZES, dtype=float)
    fit = fit_alpha_beta(sizes, 20.0 + sizes / (10.0 * 1e3))
    assert fit.alpha_us == pytest.approx(20.0, rel=0.05)
    assert fit.bandwidth_gbps == pytest.approx(10.0, rel=0.05)
    assert not fit.poor
    rng = np.random.default_rng(0)
    noisy = rng.uniform(10, 1000, size=len(sizes))  # no relation to size at all
    assert fit_alpha_beta(sizes, noisy).poor


def test_report_flags_the_planted_pair_and_straggler_only(tmp_path):
    out = str(tmp_path / "res")
    write_run(out, "run-a", slow_pair=(1, 4), straggler=3)
    proc = run_main(["report", out, "--format", "json"])
    assert proc.returncode == 1, proc.stderr
    rep = json.loads(proc.stdout)
    pairs = rep["slow node pairs (all_reduce, >10% below the median pair)"]
    assert [p["pair"] for p in pairs] == ["host11 (10.0.0.11) - host14 (10.0.0.14)"]
    assert pairs[0]["below_median"] == pytest.approx(0.4, abs=0.02)
    assert rep["slow nodes (all_reduce, >10% below the median node)"] == []
    stragglers = rep["stragglers (rank time >10% above its group's median)"]
    assert [(s["rank"], s["node"]) for s in stragglers] == [(3, "host13 (10.0.0.13)")]
    fits = {(f["topology"]): f for f in rep["latency-bandwidth fits: time = alpha + bytes / bandwidth (GBps)"]}
    assert fits["intra"]["alpha_us"] == pytest.approx(5.0, rel=0.05)
    assert fits["intra"]["bandwidth"] == pytest.approx(40.0, rel=0.05)
    head = rep["all_reduce: busbw (GBps) by message size, run run-a"]
    assert head[-1]["intra/inter"] > 3


def test_clean_dataset_exits_0_and_units(tmp_path):
    out = str(tmp_path / "res")
    write_run(out, "run-a")
    proc = run_main(["report", out, "--unit", "Gbps", "--format", "json"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    peak = {p["topology"]: p for p in json.loads(proc.stdout)["all_reduce: peak busbw (Gbps) and half-peak size"]}
    assert peak["inter"]["peak_busbw"] == pytest.approx(8 * 64 * 2**20 / (20 + 64 * 2**20 / 1e4) / 1e3, rel=1e-3)
    csv = run_main(["report", out, "--format", "csv"])
    assert csv.returncode == 0 and "# all_reduce: peak busbw (GBps) and half-peak size\ntopology," in csv.stdout
    md = run_main(["report", out, "--format", "markdown"])
    assert "| msg_bytes | intra | inter | mixed | intra/inter |" in md.stdout


def test_compare_flags_exactly_the_planted_drop(tmp_path):
    out = str(tmp_path / "res")
    write_run(out, "base", minute=0)
    write_run(out, "new", minute=5, drop={"msg_bytes": 1 << 20, "pattern": "intra", "factor": 0.8})
    proc = run_main(["compare", out, out, "--format", "json"])
    assert proc.returncode == 1, proc.stderr
    rep = json.loads(proc.stdout)
    rows = rep["matched rows (drops beyond 5% flagged)"]
    flagged = [r for r in rows if r["flag"] == "DROP"]
    assert [(r["msg_bytes"], r["pattern"]) for r in flagged] == [(1 << 20, "intra")]
    assert flagged[0]["busbw_change"] == "-20.0%"
    assert rep["summary"][0]["baseline_run"] == "base" and rep["summary"][0]["new_run"] == "new"
    same = run_main(["compare", out, out, "--baseline-run", "base", "--new-run", "base"])
    assert same.returncode == 0, same.stdout


def test_compare_lists_rows_present_in_one_run_only(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    write_run(a, "base", nodes=4)
    write_run(b, "new", nodes=6)  # more nodes: intra rows match, pairwise groups too (same key)
    df = dataset.load(b)
    df2 = df[df.msg_bytes != SIZES[0]]
    matched, only_base, only_new = compare(dataset.load(a), df2, 0.05)
    assert len(only_base) == 2 and set(only_base.msg_bytes) == {SIZES[0]}
    assert len(only_new) == 0


def test_report_bad_input_exits_2(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = run_main(["report", str(empty)])
    assert proc.returncode == 2 and "no result rows" in proc.stderr
    out = str(tmp_path / "res")
    write_run(out, "run-a", nodes=3)
    proc = run_main(["report", out, "--run", "nope"])
    assert proc.returncode == 2 and "--run nope: no such run" in proc.stderr
    other = tmp_path / "other"
    other.mkdir()
    pq.write_table(pa.table({"schema_version": pa.array([99], pa.int32()), "x": [1]}), other / "f.parquet")
    proc = run_main(["report", str(other)])
    assert proc.returncode == 2 and "schema_version 99 is newer than this collbench reads (up to 2)" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_plots_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    out = str(tmp_path / "res")
    write_run(out, "run-a", nodes=4, slow_pair=(0, 1))
    proc = run_main(["report", out, "--plots", str(tmp_path / "png")])
    assert proc.returncode == 1
    names = sorted(p.name for p in (tmp_path / "png").iterdir())
    assert names == ["busbw_all_reduce.png", "pairwise_heatmap.png"]
    assert all((tmp_path / "png" / n).read_bytes()[:4] == b"\x89PNG" for n in names)
