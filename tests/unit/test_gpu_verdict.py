"""The GPU check's verdict line, on rows shaped like an 8 x H100 node's, a 2-GPU and a one-GPU
machine's: what each check needs, and each failing on the rows that should fail it."""

import importlib.util
import json
from pathlib import Path

import pandas as pd

_path = Path(__file__).resolve().parents[2] / "scripts" / "gpu_verdict.py"
_spec = importlib.util.spec_from_file_location("gpu_verdict", _path)
gpu_verdict = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_verdict)

SIZES = [1 << 10, 1 << 20, 256 << 20, 1 << 30]
MANIFESTS = {"sweep": {"batch_floor_us": 0.05, "spec": json.dumps({"cuda_graph": False})},
             "graph": {"batch_floor_us": 0.06, "spec": json.dumps({"cuda_graph": True})}}


def _rows(n: int, busbw: float, nccl="2.21.5", intra="NVLS+P2P/NVL", model="NVIDIA H100 80GB HBM3",
          dtypes=("bfloat16", "float8_e4m3", "float8_e5m2")):
    rows = []
    for run_id in ("sweep", "graph"):
        for coll in ("all_reduce", "overlap") if run_id == "sweep" else ("all_reduce",):
            for dtype in dtypes if coll != "overlap" else ("bfloat16",):
                for s in SIZES:
                    time_us = 10.0 + s / (busbw * 1e3) if busbw else 10.0
                    rows.append({
                        "run_id": run_id, "collective": coll, "dtype": dtype, "world_size": n, "n_nodes": 1,
                        "msg_bytes": s, "status": "ok", "n_wrong": 0, "busbw_gbps": busbw * s / (1 << 30),
                        "gpu_model": model, "nccl_version": nccl, "intra_transport": intra if n > 1 else None,
                        "net_transport": None, "time_us": time_us, "time_us_batch": 0.9 * time_us,
                        "mem_peak_bytes": s + (4 << 20), "mem_estimate_bytes": s + (4 << 20),
                        "t_step_us": 30.0 if coll == "overlap" else None,
                        "overlap_efficiency": 0.8 if coll == "overlap" else None})
    return pd.DataFrame(rows)


def test_a_healthy_node_passes_with_its_figures():
    ok, line = gpu_verdict.verdict(_rows(8, 362.0), MANIFESTS, (9, 0))
    assert ok, line
    assert line.startswith("collbench GPU check: PASS | 8 x NVIDIA H100 80GB HBM3 | NCCL library 2.21.5 (loaded; its log's banner) | "
                           "intra NVLS+P2P/NVL")
    for fact in ("memory peak/estimate <= 1.00 from 64M", "batch/per-call time from 1M: median 0.90",
                 "empty-call floor 0.06 us", "1 collectives x 3 dtypes", "overlap efficiency 80%", "cuda-graph rows 12",
                 "all_reduce 1024M busbw 362.0 GB/s (floor 300)"):
        assert fact in line, (fact, line)


def test_each_check_fails_on_what_it_checks():
    def fails(rows, manifests=MANIFESTS, cc=(9, 0)) -> str:
        ok, line = gpu_verdict.verdict(rows, manifests, cc)
        assert not ok and line.startswith("collbench GPU check: FAIL")
        return line

    assert fails(_rows(8, 250.0)).endswith("all_reduce busbw 250.0 GB/s below the H100 floor 300")
    line = fails(_rows(8, 362.0, nccl=None, intra=None))
    assert "NCCL's log was not read on every row" in line and "no intra-node path" in line
    wrong = _rows(8, 362.0)
    wrong.loc[0, "n_wrong"] = 3
    assert "1 row(s) not ok or not exact" in fails(wrong)
    hungry = _rows(8, 362.0)
    hungry.loc[3, "mem_peak_bytes"] += 64 << 20
    assert "1 row(s) took more GPU memory than estimated (worst all_reduce bfloat16 1073741824 B" in fails(hungry)
    slow_batch = _rows(8, 362.0)
    slow_batch.loc[2, "time_us_batch"] = 1.5 * slow_batch.loc[2, "time_us"]
    assert "1 row(s) from 1M whose batch time exceeds 1.10x the per-call time" in fails(slow_batch)
    assert "no empty-call floor" in fails(_rows(8, 362.0), {r: {**m, "batch_floor_us": None} for r, m in MANIFESTS.items()})
    assert "compute capability 9.0 and no float8 rows" in fails(_rows(8, 362.0, dtypes=("bfloat16",)))
    no_overlap = _rows(8, 362.0)
    assert "the overlap workload was not measured" in fails(no_overlap[no_overlap.collective != "overlap"])
    assert "no --cuda-graph run" in fails(_rows(8, 362.0), {"sweep": MANIFESTS["sweep"]})
    across = _rows(8, 362.0)
    across.loc[0, "net_transport"] = "Socket/eth0"
    assert "one node, yet 1 row(s) name an inter-node path" in fails(across)


def test_an_8_gpu_pcie_node_is_not_held_to_the_nvlink_floor():
    # "NVIDIA H100 PCIe": the same part name, GPUs connected through PCIe switches
    ok, line = gpu_verdict.verdict(_rows(8, 40.0, intra="P2P/PIX", model="NVIDIA H100 PCIe"), MANIFESTS, (9, 0))
    assert ok and "all_reduce busbw 40.0 GB/s (no floor for this part/count/path)" in line


def test_one_gpu_has_no_bandwidth_floor_and_float8_only_where_the_gpu_has_it():
    ok, line = gpu_verdict.verdict(_rows(1, 0.0), MANIFESTS, (9, 0))
    assert ok and "busbw" not in line, line  # one GPU: no bus, no floor
    ok, line = gpu_verdict.verdict(_rows(1, 0.0, model="NVIDIA A100-SXM4-80GB", dtypes=("bfloat16",)), MANIFESTS, (8, 0))
    assert ok, line


def test_every_multi_gpu_row_names_its_intra_path():
    # a two-GPU machine: groups of 2 only; a row whose group read no channel lines fails the check
    rows = _rows(2, 40.0, intra="P2P/NVL")
    ok, line = gpu_verdict.verdict(rows, MANIFESTS, (9, 0))
    assert ok and "intra P2P/NVL" in line and "all_reduce busbw 40.0 GB/s (no floor for this part/count/path)" in line
    rows.loc[1, "intra_transport"] = None
    ok, line = gpu_verdict.verdict(rows, MANIFESTS, (9, 0))
    assert not ok and line.endswith("| 1 row(s) of 2-GPU groups name no intra-node path")


def _one_gpu(copy_time_us: float = 10.0):  # _rows with busbw 0: every time_us is 10 us
    rows = _rows(1, 0.0)
    rows = rows[rows.run_id == "sweep"].copy()
    rows["collective"] = rows.collective.replace({"all_reduce": "all_gather"})
    in_place = rows.assign(in_place=True, time_us=5.0, time_us_batch=5.0)
    # all_reduce, broadcast and reduce run in place only: on one rank NCCL launches nothing for them
    idle = [in_place[in_place.collective == "all_gather"].assign(collective=c) for c in ("all_reduce", "broadcast")]
    both = pd.concat([rows.assign(in_place=False), in_place, *idle])
    return both, {"sweep": MANIFESTS["sweep"]}, copy_time_us


def test_one_gpu_passes_on_what_ran_and_names_what_did_not():
    """One rank: no overlap, no CUDA graph, in-place rows that time a launch; the copy timed twice."""
    rows, manifests, copy_time_us = _one_gpu()
    asked = []

    def copy_us(nbytes: int) -> float:
        asked.append(nbytes)
        return copy_time_us

    ok, line = gpu_verdict.verdict(rows, manifests, (9, 0), copy_us=copy_us)
    assert ok, line
    assert asked == [1 << 30]  # the largest out-of-place all_gather
    assert "all_gather 1024M on 1 rank (a device copy)" in line and "(x1.00)" in line
    assert "overlap" not in line and "cuda-graph" not in line and "batch/per-call" not in line
    # the collectives that put work on the GPU named apart from those that put none
    assert ("| GPU work on 1 rank: 1 collectives x 3 dtypes (all_gather: out of place, a device copy), none from "
            "all_reduce, broadcast (in place only: NCCL launches nothing) |") in line, line
    assert "collectives x 3 dtypes |" not in line.replace("GPU work on 1 rank: 1 collectives x 3 dtypes (", "")
    lines = gpu_verdict.not_checked(1, gpu=True, nccl_version="2.27.5")
    one_rank = [x for x in lines if x.startswith("not exercised (1 rank): ")]
    assert len(one_rank) == 8 and any("a straggler by arrival" in x for x in one_rank)
    assert any("in-place all_reduce, broadcast and reduce" in x for x in lines)
    assert any("float8 reductions" in x for x in lines) and any("CUDA graph" in x for x in lines)
    # NCCL's telemetry a passing sweep cannot show, and diagnostics by the version that has them
    assert lines[-3].startswith("not exercised: NCCL RAS") and lines[-2].startswith("not exercised: the NCCL Inspector")
    assert lines[-1] == "not run (NCCL 2.27.5 below 2.31): NCCL's own diagnostics"
    assert gpu_verdict.not_checked(2, gpu=True, nccl_version="2.31.1") == [
        f"not exercised: {what}" for what in gpu_verdict.NOT_BY_A_PASSING_SWEEP] + [
        "not exercised: NCCL's own diagnostics (the check does not set NCCL_RUN_DIAGNOSTICS)"]
    # a copy timed twice as slow as torch's own is a timing fault, named
    ok, line = gpu_verdict.verdict(rows, manifests, (9, 0), copy_us=lambda nbytes: copy_time_us / 2)
    assert not ok and "one-rank all_gather time x2.00 of torch's copy of the same bytes" in line
    # an in-place row below the empty-call floor is not a fault on one rank (NCCL launched nothing) ...
    rows.loc[rows.in_place, "time_us_batch"] = 0.01
    assert gpu_verdict.verdict(rows, manifests, (9, 0), copy_us=copy_us)[0]
    # ... an out-of-place one is
    rows.loc[~rows.in_place & (rows.msg_bytes == 1024), "time_us_batch"] = 0.01
    ok, line = gpu_verdict.verdict(rows, manifests, (9, 0), copy_us=copy_us)
    assert not ok and "a batch time at or below the empty-call floor" in line


def test_the_rehearsal_verdict_judges_only_what_a_cpu_can_show():
    rows = _rows(2, 0.5, nccl=None, intra=None, model=None, dtypes=("float32", "int8"))
    rows["mem_peak_bytes"] = None
    ok, line = gpu_verdict.verdict(rows, {}, None, gpu=False)
    assert ok, line
    assert line == ("collbench GPU check: PASS | 2 CPU ranks (rehearsal, no GPU) | 1 collectives x 3 dtypes | "
                    "overlap efficiency 80%")
    lines = gpu_verdict.not_checked(2, gpu=False)
    assert lines[0] == "not run (no GPU): NCCL's log (version, intra- and inter-node paths)" and len(lines) == 7
    wrong = rows.copy()
    wrong.loc[0, "n_wrong"] = 1
    assert gpu_verdict.verdict(wrong, {}, None, gpu=False) == (
        False, line.replace("PASS", "FAIL") + " | 1 row(s) not ok or not exact")


def test_the_build_nccl_ran_with_is_printed_where_rows_have_it():
    rows = _rows(8, 362.0)
    rows["nccl_git_hash"] = "ebd1e92"
    rows["nccl_net_plugin"] = None
    rows["nccl_tuner_plugin"] = "internal"
    rows.loc[rows.run_id == "graph", "nccl_buffers_registered"] = "IPC+NVLS"
    ok, line = gpu_verdict.verdict(rows, MANIFESTS, (9, 0))
    assert ok and "| NCCL library 2.21.5 (loaded; its log's banner) | NCCL git ebd1e92 | NCCL tuner internal | NCCL registered IPC+NVLS | intra" in line
    assert "net plugin" not in line and "NCCL git" not in gpu_verdict.verdict(_rows(8, 362.0), MANIFESTS, (9, 0))[1]


def test_the_recorded_h200_run_passes_with_what_one_gpu_did():
    """The GPU check's own sweep on one H200 (tests/fixtures/gpu/h200_20261204), read back: the
    verdict as it printed there, torch's copy time given as it measured it (133.5 us)."""
    from orchestrator.results import dataset

    path = str(Path(__file__).resolve().parents[1] / "fixtures/gpu/h200_20261204/results/sweep")
    df = dataset.load(path, latest=False)
    manifests = {r: dataset.manifest(path, r) for r in sorted(set(df.run_id))}
    ok, line = gpu_verdict.verdict(df, manifests, (9, 0), copy_us=lambda nbytes: 133.5)
    assert ok, line
    assert line == (
        "collbench GPU check: PASS | 1 x NVIDIA H200 | NCCL library 2.28.9 (loaded; its log's banner) | memory "
        "peak/estimate <= 1.00 from 64M | empty-call floor 0.10 us | GPU work on 1 rank: 4 collectives x 8 dtypes "
        "(all_gather, all_to_all, all_to_allv, reduce_scatter: out of place, a device copy), none from all_reduce, "
        "broadcast, reduce (in place only: NCCL launches nothing) | all_gather 256M on 1 rank (a device copy) "
        "130.6 us, torch's copy 133.5 us (x0.98)")
    # torch's copy twice as fast as collbench's timing of the same bytes would fail it
    assert not gpu_verdict.verdict(df, manifests, (9, 0), copy_us=lambda nbytes: 65.0)[0]


def test_the_line_says_the_dispatch_floor_and_how_many_rows_are_within_it():
    rows = _rows(8, 362.0)
    rows["dispatch_bound"] = rows.time_us < 1.5 * 12.0  # 1K and 1M: 10.0 and 12.9 us
    manifests = {r: {**m, "dispatch_floor_us": 12.0} for r, m in MANIFESTS.items()}
    ok, line = gpu_verdict.verdict(rows, manifests, (9, 0))
    within = int(rows.dispatch_bound.sum())
    assert ok and within == 14 and f"dispatch floor 12.0 us ({within} of {len(rows)} rows within 1.5x)" in line, line
    assert "dispatch floor" not in gpu_verdict.verdict(_rows(8, 362.0), MANIFESTS, (9, 0))[1]  # none measured
