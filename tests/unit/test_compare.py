"""compare against run-to-run noise: the noise estimators on samples of known spread, the command
on synthetic runs whose changes are planted (tests/synthetic.py), and its error rates from a
fixed seed (benchmarks/compare_errors.py drives the real comparison)."""

import json

import numpy as np
import pytest

from benchmarks.compare_errors import error_rates
from orchestrator.analysis.noise import MIN_PEERS, peer_sigma, quantile, run_sigma
from orchestrator.results.store import ResultStore
from tests.helpers import run_main
from tests.synthetic import SIZES, write_cluster_run

IP = [f"10.0.0.{10 + i}" for i in range(8)]
SPEC = {"collectives": ["all_reduce"], "patterns": ["pairwise"], "min_bytes": 1024, "output": "results"}


def test_quantile_is_students_t():
    # table values of Student's t and the normal
    assert quantile(0.975, 3) == pytest.approx(3.1824, abs=1e-3)
    assert quantile(0.975, 10) == pytest.approx(2.2281, abs=1e-3)
    assert quantile(0.999, 5) == pytest.approx(5.8934, abs=1e-3)
    assert quantile(0.975, None) == pytest.approx(1.95996, abs=1e-4)


def test_peer_sigma_sees_the_noise_and_not_the_fault():
    rng = np.random.default_rng(0)
    healthy = rng.normal(0.0, 0.02, 27)
    sigma, _ = peer_sigma(np.append(healthy, np.log(1 / 0.6)))  # one pair lost 40% among 27
    assert 0.01 < sigma < 0.04
    sigma, _ = peer_sigma(healthy + 0.3)  # every link 26% slower: a regression, not noise
    assert sigma < 0.04
    sigma, _ = peer_sigma(np.array([0.01, -0.02, 0.0, 0.69, 0.70, 0.68]))  # a slow node in 3 of 4 nodes' 6 pairs
    assert sigma < 0.04
    sigma, _ = peer_sigma(-np.log([0.66, 1.1, 1.5, 1.93]))  # four links that moved -34% to +93%
    assert sigma > 0.3
    assert peer_sigma(healthy[: MIN_PEERS - 1]) == (None, 0.0)


def test_run_sigma_recovers_the_spread_between_runs():
    rng = np.random.default_rng(1)
    links, runs = 200, 3
    level = rng.normal(5.0, 1.0, links)  # each link its own speed
    means = (level[:, None] + rng.normal(0.0, 0.1, (links, runs))).ravel()
    owner = np.repeat(np.arange(links), runs)
    sigma, df = run_sigma(means, owner)
    assert sigma == pytest.approx(0.1, rel=0.12) and df == pytest.approx(0.37 * links * (runs - 1))
    means[:3] += 2.0  # one link's first run far off: the median does not follow it
    assert run_sigma(means, owner)[0] == pytest.approx(sigma, rel=0.05)
    assert run_sigma(means[:3], owner[:3])[0] is None  # one link, three runs: 2 residuals are too few


def _run(out, run_id, minute, seed, faults=(), spec=SPEC, nodes=6):
    write_cluster_run(out, run_id, nodes=nodes, ranks_per_node=1, patterns=("pairwise",), noise=0.05, seed=seed,
                      minute=minute, faults=faults)
    ResultStore(out, run_id).write_manifest({"command": "run", "state": "finished", "spec": json.dumps(spec)})


def _compare(*args, code: int) -> dict:
    """compare's tables, once it exited with `code` (0: nothing flagged, 1: a drop flagged)."""
    proc = run_main(["compare", *args, "--format", "json"])
    tables = json.loads(proc.stdout)["tables"] if proc.stdout else {}
    assert proc.returncode == code, (proc.stderr, [r for r in tables.get("matched", []) if r["flag"]])
    return tables


def test_four_links_that_moved_minus_34_to_plus_93_percent_are_noise(tmp_path):
    """Issue 21: the same intra sweep twice on a shared host; each node's intra link moved by its own
    amount. No drop is flagged, and every row says its noise came from its peers."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    write_cluster_run(a, "base", nodes=4, ranks_per_node=2, patterns=("intra",), noise=0.02, seed=1)
    moved = tuple(("node_intra", i, f) for i, f in enumerate((0.66, 1.1, 1.5, 1.93)))
    write_cluster_run(b, "new", nodes=4, ranks_per_node=2, patterns=("intra",), noise=0.02, seed=2, faults=moved)
    tables = _compare(a, b, code=0)
    assert all(r["flag"] == "" for r in tables["matched"])
    assert min(r["busbw_change"] for r in tables["matched"]) == pytest.approx(-0.34, abs=0.03)
    assert {r["noise_source"] for r in tables["matched"]} == {"peers"}
    assert tables["summary"][0]["noise_peers"] == len(tables["matched"])


def test_a_regression_of_every_link_is_flagged(tmp_path):
    """The spread about the peers' median does not grow when every link is 25% slower (a driver
    upgrade gone wrong): every link is flagged."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    write_cluster_run(a, "base", nodes=8, ranks_per_node=1, patterns=("pairwise",), noise=0.02, seed=1,
                      sizes=[1 << 22])
    slower = tuple(("pair", x, y, 0.75) for x in range(8) for y in range(x + 1, 8))
    write_cluster_run(b, "new", nodes=8, ranks_per_node=1, patterns=("pairwise",), noise=0.02, seed=2,
                      sizes=[1 << 22], faults=slower)
    tables = _compare(a, b, code=1)
    assert len(tables["matched"]) == 28 and all(r["flag"] == "DROP" for r in tables["matched"])


def test_runs_of_the_same_sweep_are_the_baseline_and_only_the_slow_nodes_links_are_flagged(tmp_path):
    """Three runs of one sweep in a folder, then one with node 2's network at half speed: `compare
    out out` takes the three as the baseline (another sweep's run is left out), reads the noise
    from them, and flags exactly node 2's five pairs at every size."""
    out = str(tmp_path / "res")
    _run(out, "other", minute=0, seed=9, spec={**SPEC, "min_bytes": 8})  # not the same sweep
    for i in range(3):
        _run(out, f"r{i}", minute=1 + i, seed=i)
    _run(out, "healthy", minute=4, seed=4)
    tables = _compare(out, out, code=0)
    assert tables["summary"][0]["baseline_runs"] == ["r0", "r1", "r2"]
    assert {r["noise_source"] for r in tables["matched"]} <= {"runs", "iterations"}
    assert tables["summary"][0]["noise_runs"] > 0
    _run(out, "slow", minute=5, seed=5, faults=(("node_nic", 2, 0.5),))
    tables = _compare(out, out, code=1)
    assert tables["summary"][0]["baseline_runs"] == ["r0", "r1", "r2", "healthy"]
    flagged = {r["link"] for r in tables["matched"] if r["flag"] == "DROP"}
    assert flagged == {f"{IP[min(2, j)]}:0,{IP[max(2, j)]}:0" for j in range(6) if j != 2}
    largest = [r for r in tables["matched"] if r["msg_bytes"] == max(SIZES) and r["link"] in flagged]
    assert len(largest) == 5 and all(r["flag"] and r["busbw_change"] == pytest.approx(-0.5, abs=0.05) for r in largest)
    # named runs are used as named
    tables = _compare(out, out, "--baseline-run", "r1,r2", "--new-run", "healthy", code=0)
    assert tables["summary"][0]["baseline_runs"] == ["r1", "r2"]


def test_a_small_cluster_with_one_baseline_run_is_not_judged_and_says_so(tmp_path):
    """Three nodes, one intra link each, one run on each side: no shape has 4 links, so nothing
    says how far a healthy link moves between runs. A -24% move (issue 21's audit) is not flagged
    on the rows' iterations alone; every row says `unjudged`, and a line says what to do. With a
    second baseline run the same comparison is judged."""
    out = str(tmp_path / "res")
    for i, factor in enumerate((1.0, 1.05)):
        write_cluster_run(out, f"r{i}", nodes=3, ranks_per_node=2, patterns=("intra",), noise=0.01, seed=i,
                          minute=i, faults=(("node_intra", 1, factor),))
        ResultStore(out, f"r{i}").write_manifest({"command": "run", "state": "finished", "spec": json.dumps(SPEC)})
    write_cluster_run(out, "new", nodes=3, ranks_per_node=2, patterns=("intra",), noise=0.01, seed=7, minute=9,
                      faults=(("node_intra", 1, 0.76),))
    proc = run_main(["compare", out, out, "--baseline-run", "r0", "--new-run", "new", "--format", "json"])
    tables = json.loads(proc.stdout)["tables"]
    assert proc.returncode == 0 and not any(r["flag"] for r in tables["matched"])
    assert min(r["busbw_change"] for r in tables["matched"]) == pytest.approx(-0.24, abs=0.03)
    assert {r["noise_source"] for r in tables["matched"]} == {"unjudged"}
    assert tables["summary"][0]["noise_unjudged"] == len(tables["matched"])
    assert f"{len(tables['matched'])} of {len(tables['matched'])} matched row(s) not judged" in proc.stderr
    assert "--baseline-run A,B,C" in proc.stderr
    # two baseline runs: the spread between them is the noise, and the -24% stands out of it
    tables = _compare(out, out, "--baseline-run", "r0,r1", "--new-run", "new", code=1)
    assert "unjudged" not in {r["noise_source"] for r in tables["matched"]}
    assert {r["link"].split(":")[0] for r in tables["matched"] if r["flag"]} == {IP[1]}


def test_a_run_is_not_compared_with_itself(tmp_path):
    out = str(tmp_path / "res")
    _run(out, "a", minute=0, seed=0)
    _run(out, "b", minute=1, seed=1)
    proc = run_main(["compare", out, out, "--baseline-run", "a,b", "--new-run", "b"])
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == ("collbench: error: --new-run b: is also a --baseline-run; a run compared with itself "
                           "shows nothing\n")


def test_unknown_runs_and_runs_with_nothing_in_common_are_refused_in_one_line(tmp_path):
    out = str(tmp_path / "res")
    _run(out, "a", minute=0, seed=0)
    _run(out, "b", minute=1, seed=1)
    proc = run_main(["compare", out, out, "--baseline-run", "nope"])
    assert proc.returncode == 2 and proc.stderr.startswith("collbench: error: --baseline-run nope: no such run in ")
    assert proc.stderr.count("\n") == 1 and proc.stdout == ""
    proc = run_main(["compare", out, out, "--new-run", "nope"])
    assert proc.returncode == 2 and "--new-run nope: no such run" in proc.stderr
    other = str(tmp_path / "other")  # other nodes: not one link in common
    write_cluster_run(other, "c", nodes=2, ranks_per_node=2, patterns=("intra",))
    proc = run_main(["compare", out, other])
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1
    assert "no ok row of run c matches one of baseline run(s) a,b by link: nothing to compare" in proc.stderr
    failed = str(tmp_path / "failed")  # every group of the new run timed out
    write_cluster_run(failed, "f", nodes=2, ranks_per_node=2, patterns=("intra",), failed_groups=("r0-g0", "r0-g1"))
    proc = run_main(["compare", other, failed])
    assert proc.returncode == 2 and proc.stderr == "collbench: error: run f has no ok row: nothing to compare\n"


def test_error_rates_from_a_fixed_seed():
    """benchmarks/compare_errors.py, a few of its cases (docs/PERFORMANCE.md has them all): on tc-shaped
    lab links and GPU-fleet noise a 2x slow node's links are all found and no healthy link is flagged;
    on the shared host's noise, healthy links are rarely flagged, with one baseline run or three."""
    fp, fn, links = error_rates("lab", "pairs", 8, 2.0, baselines=1, trials=8, seed=0)
    assert links == 28 and fp <= 0.01 and fn == 0.0
    fp, fn, _ = error_rates("lab", "pairs", 4, 2.0, baselines=3, trials=8, seed=0)
    assert fp <= 0.01 and fn == 0.0
    fp, fn, _ = error_rates("gpu", "links", 16, 1.25, baselines=1, trials=8, seed=0)
    assert fp <= 0.01 and fn == 0.0
    fp, _, _ = error_rates("host", "pairs", 8, 1.0, baselines=1, trials=8, seed=0)
    assert fp <= 0.03
