"""The GPU check's verdict line, on rows shaped like an 8 x H100 node's and a one-GPU machine's."""

import importlib.util
from pathlib import Path

import pandas as pd

_path = Path(__file__).resolve().parents[2] / "scripts" / "gpu_verdict.py"
_spec = importlib.util.spec_from_file_location("gpu_verdict", _path)
gpu_verdict = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_verdict)


def _rows(n: int, busbw: float, nccl="2.21.5", intra="NVLS+P2P/NVL", model="NVIDIA H100 80GB HBM3"):
    sizes = [1 << 20, 256 << 20, 1 << 30]
    return pd.DataFrame([{
        "collective": "all_reduce", "world_size": n, "msg_bytes": s, "status": "ok", "n_wrong": 0,
        "busbw_gbps": busbw * s / (1 << 30), "gpu_model": model, "nccl_version": nccl,
        "intra_transport": intra if n > 1 else None} for s in sizes])


def test_a_healthy_node_passes_with_its_figures():
    ok, line = gpu_verdict.verdict(_rows(8, 362.0))
    assert ok and line == ("collbench GPU check: PASS | 8 x NVIDIA H100 80GB HBM3 | NCCL 2.21.5 | "
                           "intra NVLS+P2P/NVL | all_reduce 1024M busbw 362.0 GB/s (floor 300)")


def test_below_the_floor_or_without_transport_fails():
    ok, line = gpu_verdict.verdict(_rows(8, 250.0))
    assert not ok and line.endswith("all_reduce busbw 250.0 GB/s below the H100 floor 300")
    ok, line = gpu_verdict.verdict(_rows(8, 362.0, nccl=None, intra=None))
    assert not ok and "NCCL's log was not read on every row" in line and "no intra-node path" in line
    wrong = _rows(8, 362.0)
    wrong.loc[0, "n_wrong"] = 3
    assert gpu_verdict.verdict(wrong) == (False, gpu_verdict.verdict(wrong)[1]) and "1 row(s) not ok" in \
        gpu_verdict.verdict(wrong)[1]


def test_one_gpu_has_no_bandwidth_floor():
    ok, line = gpu_verdict.verdict(_rows(1, 0.0))
    assert ok and line == "collbench GPU check: PASS | 1 x NVIDIA H100 80GB HBM3 | NCCL 2.21.5"


def test_every_multi_gpu_row_names_its_intra_path():
    # a two-GPU machine: groups of 2 only; a row whose group read no channel lines fails the check
    rows = _rows(2, 40.0, intra="P2P/NVL")
    assert gpu_verdict.verdict(rows) == (True, "collbench GPU check: PASS | 2 x NVIDIA H100 80GB HBM3 | NCCL 2.21.5 | "
                                               + "intra P2P/NVL | all_reduce busbw 40.0 GB/s (no floor for this part/count)")
    rows.loc[1, "intra_transport"] = None
    ok, line = gpu_verdict.verdict(rows)
    assert not ok and line.endswith("| 1 row(s) of 2-GPU groups name no intra-node path")
