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


def _predict(path, *args, code=0):
    proc = run_main(["predict", path, "--format", "json", *args])
    assert proc.returncode == code and proc.stdout, proc.stderr
    return json.loads(proc.stdout)["tables"] | {"stderr": proc.stderr}


def test_dp_gradient_all_reduce_across_nodes(fits_dataset):
    rep = _predict(fits_dataset, "--params", "1e9", "--dp", "2", "--ranks-per-node", "1", "--bucket", "25M")
    (term,) = rep["terms"]
    # 1e9 bf16 params = 2e9 bytes = 77 buckets of 25 MiB (26214400 bytes, the last one short);
    # each 20 us + 26214400 B / 10 GB/s = 2641.44 us
    assert term["count"] == 77 and term["msg_bytes"] == 26214400
    assert term["time_ms"] == pytest.approx(77 * 2641.44 / 1e3, rel=1e-9)
    assert "all_reduce inter world 2" in term["fit"] and term["warning"] == ""
    assert rep["summary"][0]["comm_ms_per_step"] == pytest.approx(203.39088, rel=1e-9)
    assert rep["summary"][0]["complete"] and rep["stderr"] == ""
    assert _predict(fits_dataset, "--params", "1e9", "--dp", "2", "--ranks-per-node", "1")["terms"] == rep["terms"]


def test_the_old_spellings_keep_their_meaning_for_a_release_and_say_so(fits_dataset):
    rep = _predict(fits_dataset, "--params", "1e9", "--dp", "2", "--gpus-per-node", "1", "--bucket-mb", "25",
                   "--what-if", "gpus-per-node=2")
    (term,) = rep["terms"]
    assert term["count"] == 80 and term["msg_bytes"] == 25e6  # --bucket-mb: MB of 1e6 bytes, as before
    assert rep["stderr"].splitlines() == [
        "collbench: note: --gpus-per-node is now --ranks-per-node; it goes in the next release",
        "collbench: note: --bucket-mb is now --bucket SIZE (binary, 25M = 25 MiB); it goes in the next release",
        "collbench: note: --what-if gpus-per-node is now ranks-per-node; it goes in the next release"]


def test_tp_activation_all_reduce_inside_a_node(fits_dataset):
    rep = _predict(fits_dataset, "--params", "1e9", "--tp", "2", "--ranks-per-node", "2", "--layers", "10",
                   "--seq", "1024", "--hidden", "1024", "--micro-batch", "2", "--micro-batches", "3")
    (term,) = rep["terms"]
    act = 2 * 1024 * 1024 * 2  # micro_batch x seq x hidden x 2 bytes
    assert term["msg_bytes"] == act and term["count"] == 10 * 3 * 4
    assert term["time_ms"] == pytest.approx(120 * (5 + act / 40e3) / 1e3, rel=1e-6)
    assert "all_reduce intra world 2" in term["fit"]


def test_an_incomplete_total_is_said_and_exits_1(fits_dataset):
    rep = _predict(fits_dataset, "--params", "1T", "--dp", "2", "--pp", "2", "--ranks-per-node", "1",
                   "--bucket", "1000000000", code=1)
    terms = {t["term"]: t for t in rep["terms"]}
    assert "EXTRAPOLATED" in terms["dp gradient all_reduce"]["warning"]  # 1e9-byte buckets, measured up to 64M
    missing = terms["pp activation send/recv"]
    assert missing["time_ms"] is None and missing["warning"] == "not measured"
    assert missing["measure_with"].startswith("collbench run --collectives send_recv --patterns inter")
    (summary,) = rep["summary"]
    assert summary["comm_ms_per_step"] is None and not summary["complete"]
    assert summary["note"].startswith("incomplete: not priced: pp activation send/recv (collbench run")
    assert summary["measured_terms_ms"] == pytest.approx(terms["dp gradient all_reduce"]["time_ms"])
    assert rep["stderr"].splitlines()[-1] == "collbench: incomplete: 1 term(s) not priced by run run-p's fits: " \
        "pp activation send/recv"  # the dataset holds no other run to name


def test_a_rejected_fit_is_named_with_its_reason_and_an_earlier_run_that_prices_the_layout(tmp_path):
    """The default run's fits can be rejected (a busy host's zig-zag of sizes): predict says which
    fit and why, not just 'not measured', and names the latest other sweep whose fits price it all."""
    out = str(tmp_path / "res")
    write_run(out, "earlier", nodes=4, minute=0)
    write_run(out, "later", nodes=4, minute=5, zigzag=0.6)  # no line fits its pairwise times
    rep = _predict(out, "--params", "1e9", "--dp", "2", "--ranks-per-node", "1", code=1)
    (term,) = rep["terms"]
    assert term["time_ms"] is None and term["warning"] == "fit rejected"
    assert term["fit"] == "all_reduce inter world 2: its fit rejected (the median size off by 228% > 30%)"
    assert rep["stderr"].splitlines() == [
        f"predict: run later: the latest of 2 in {out}",
        "collbench: incomplete: 1 term(s) not priced by run later's fits: dp gradient all_reduce (all_reduce inter "
        "world 2: its fit rejected (the median size off by 228% > 30%)); run earlier's fits price every term: "
        "--run earlier"]
    priced = _predict(out, "--params", "1e9", "--dp", "2", "--ranks-per-node", "1", "--run", "earlier")
    assert priced["summary"][0]["complete"] and priced["terms"][0]["time_ms"] == pytest.approx(77 * 2641.44 / 1e3)


def test_another_world_size_is_scaled_by_the_busbw_factor(fits_dataset):
    """The fits are of 2-rank groups; at 8 ranks all_reduce moves 2(n-1)/n of the buffer per rank:
    the bus bandwidth carries over, so the algorithm bandwidth is scaled by f(2)/f(8) = 1/1.75."""
    rep = _predict(fits_dataset, "--params", "7B", "--dp", "8", "--ranks-per-node", "1", "--bucket", "25000000")
    (term,) = rep["terms"]
    assert "bandwidth scaled x0.571 by the busbw factor for world 8" in term["fit"]
    assert term["warning"] == "other world size"
    # 7e9 bf16 params = 14e9 bytes = 560 buckets; each 20 us + 25e6 B / (10 GB/s / 1.75)
    assert term["time_ms"] == pytest.approx(560 * (20 + 25e6 / (10e3 / 1.75)) / 1e3, rel=1e-6)


@pytest.mark.parametrize("args, message", [
    (["--params", "7X"], "argument --params: '7X': expected a count such as 7e9, 7B or 1.5T"),
    (["--params", "7B", "--tp", "3", "--ranks-per-node", "8"],
     "--tp 3: neither divides nor is a multiple of --ranks-per-node 8"),
    (["--params", "7B", "--pp", "64", "--layers", "32"], "--pp 64: more pipeline stages than --layers 32"),
    (["--params", "7B", "--pp", "3", "--layers", "32"], "--pp 3: does not divide --layers 32"),
    (["--params", "0"], "--params 0: must be positive"),
])
def test_impossible_layouts_are_refused(fits_dataset, args, message):
    proc = run_main(["predict", fits_dataset, *args])
    assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_group_topology():
    assert group_topology(8, 1, 8) == "intra"
    assert group_topology(4, 8, 8) == "inter"
    assert group_topology(4, 4, 8) == "mixed"


def test_what_if_prices_another_layout_and_another_clusters_fits_term_by_term(fits_dataset, tmp_path):
    rep = _predict(fits_dataset, "--params", "1e9", "--dp", "2", "--ranks-per-node", "1", "--bucket", "25000000",
                   "--what-if", "bucket=50000000", "dtype=float32")
    (now,) = rep["terms"][:1]
    (then,) = rep["what_if_terms"]
    # float32: 4e9 bytes in 80 buckets of 50e6 bytes, each 20 us + 50e6 B / 10 GB/s = 5020 us
    assert then["what_if_ms"] == pytest.approx(80 * 5020 / 1e3) and then["now_ms"] == pytest.approx(now["time_ms"])
    assert then["ratio"] == pytest.approx(80 * 5020 / (80 * 2520))
    assert rep["what_if"][0]["what_if"] == "bucket=50000000 dtype=float32"
    faster = str(tmp_path / "faster")  # the same cluster with a network 4x faster: another dataset's fits
    write_run(faster, "run-f", nodes=4, alpha_us=20.0, bw_gbps=40.0, intra_bw_gbps=40.0)
    rep = _predict(fits_dataset, "--params", "1e9", "--dp", "2", "--ranks-per-node", "1", "--what-if-results", faster)
    (then,) = rep["what_if_terms"]
    assert then["what_if_ms"] == pytest.approx(77 * (20 + (25 << 20) / 40e3) / 1e3)  # 25 MiB buckets by default
    assert "run-f" in rep["what_if"][0]["what_if"]


@pytest.mark.parametrize("args, message", [
    (["--what-if", "dp"], "--what-if dp: expected KEY=VALUE"),
    (["--what-if", "color=red"], "--what-if color=red: expected KEY=VALUE with KEY one of"),
    (["--what-if", "dp=two"], "--what-if dp=two: 'two' is not a value for dp"),
    (["--what-if", "tp=3"], "--what-if: --tp 3: neither divides nor is a multiple of --ranks-per-node 8"),
    (["--what-if-results", "a", "b", "c"], "--what-if-results a b c: PATH and at most one RUN_ID"),
])
def test_bad_what_ifs_are_refused_in_one_line(fits_dataset, args, message):
    proc = run_main(["predict", fits_dataset, "--params", "1e9", "--dp", "2", *args])
    assert proc.returncode == 2 and message in proc.stderr.strip().splitlines()[-1], proc.stderr


def test_a_replays_ops_are_not_fitted(tmp_path):
    from orchestrator.results.store import ResultStore

    out = str(tmp_path / "res")
    store = ResultStore(out, "replayed")
    store.create()
    store.write_group("r0-g0", [{"run_id": "replayed", "group_id": "r0-g0", "pattern": "replay", "status": "ok",
                                 "collective": "all_reduce", "topology": "inter", "world_size": 2, "msg_bytes": b,
                                 "time_us": 10.0 + b / 1e4, "step": 0, "seq": 1} for b in (1 << 10, 1 << 14, 1 << 18)])
    proc = run_main(["predict", out, "--params", "1e9", "--dp", "2", "--ranks-per-node", "1"])
    assert proc.returncode == 2 and "holds no sweep, only replayed ops" in proc.stderr


def test_a_group_across_nodes_of_one_nvlink_domain_is_priced_from_intra_domain_fits():
    from orchestrator.analysis.predict import FitRef, choose_fit

    fits = {("all_reduce", "intra-domain", 8): FitRef("all_reduce", "intra-domain", 8, 5.0, 800.0, 1024, 1 << 30)}
    ref = choose_fit(fits, "all_reduce", "inter", 8)
    assert ref.bandwidth_gbps == 800.0 and ref.note == "from intra-domain world 8"
    assert choose_fit(fits, "all_reduce", "intra", 8) is None  # inside a node is not across nodes
