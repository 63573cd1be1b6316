"""predict against hand-computed answers from synthetic fits (known alpha and bandwidth)."""

import json

import pytest

from orchestrator.analysis.predict import group_topology
from tests.helpers import run_main
from tests.synthetic import write_run


@pytest.fixture(scope="module")
def fits_dataset(tmp_path_factory):
    # all_reduce: inter world 2: alpha 20 us, 10 GB/s; intra world 2: alpha 5 us, 40 GB/s
    out = str(tmp_path_factory.mktemp("pred") / "res")
    write_run(out, "run-p", nodes=4, alpha_us=20.0, bw_gbps=10.0, intra_bw_gbps=40.0)
    return out


def _predict(path, *args):
    proc = run_main(["predict", path, "--format", "json", *args])
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_dp_gradient_all_reduce_across_nodes(fits_dataset):
    rep = _predict(fits_dataset, "--params", "1e9", "--dp", "2", "--gpus-per-node", "1", "--bucket-mb", "25")
    (term,) = rep["terms"]
    # 1e9 bf16 params = 2e9 bytes = 80 buckets of 25e6 bytes; each 20 us + 25e6 B / 10 GB/s = 2520 us
    assert term["count"] == 80 and term["msg_bytes"] == 25e6
    assert term["time_ms"] == pytest.approx(80 * 2520 / 1e3, rel=1e-6)
    assert "all_reduce inter world 2" in term["fit"] and term["warning"] == ""
    assert rep["per-step communication"][0]["comm_ms_per_step"] == pytest.approx(201.6, rel=1e-6)


def test_tp_activation_all_reduce_inside_a_node(fits_dataset):
    rep = _predict(fits_dataset, "--params", "1e9", "--tp", "2", "--gpus-per-node", "2", "--layers", "10",
                   "--seq", "1024", "--hidden", "1024", "--micro-batch", "2", "--micro-batches", "3")
    (term,) = rep["terms"]
    act = 2 * 1024 * 1024 * 2  # micro_batch x seq x hidden x 2 bytes
    assert term["msg_bytes"] == act and term["count"] == 10 * 3 * 4
    assert term["time_ms"] == pytest.approx(120 * (5 + act / 40e3) / 1e3, rel=1e-6)
    assert "all_reduce intra world 2" in term["fit"]


def test_unmeasured_and_extrapolated_terms_are_said(fits_dataset):
    rep = _predict(fits_dataset, "--params", "1e12", "--dp", "2", "--pp", "2", "--gpus-per-node", "1",
                   "--bucket-mb", "1000")
    terms = {t["term"]: t for t in rep["terms"]}
    assert "EXTRAPOLATED" in terms["dp gradient all_reduce"]["warning"]  # 1e9-byte buckets, measured up to 64M
    assert terms["pp activation send/recv"]["time_ms"] is None
    assert terms["pp activation send/recv"]["warning"] == "not measured"


def test_group_topology():
    assert group_topology(8, 1, 8) == "intra"
    assert group_topology(4, 8, 8) == "inter"
    assert group_topology(4, 4, 8) == "mixed"
