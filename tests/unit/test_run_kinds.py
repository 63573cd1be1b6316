"""Runs know their kind (issue 45): after a qualify (or a watch) into the folder of sweeps, report,
compare and predict without a run id take the latest sweep, pass over the probes, and say so on
stderr; compare takes its baseline from runs of the same sweep, or says in one line why there is none."""

from __future__ import annotations

import json

from orchestrator.results import dataset
from orchestrator.results.store import ResultStore
from tests.helpers import run_main
from tests.synthetic import write_cluster_run

SPEC = {"collectives": ["all_reduce"], "patterns": ["pairwise"], "min_bytes": 1024, "output": "results"}


def _stored(out: str, run_id: str, minute: int, command: str = "run", spec: dict = SPEC, seed: int = 0) -> None:
    write_cluster_run(out, run_id, nodes=4, ranks_per_node=1, patterns=("pairwise",), noise=0.02, seed=seed,
                      minute=minute)
    ResultStore(out, run_id).write_manifest({"command": command, "state": "finished", "spec": json.dumps(spec)})


def _two_sweeps_then_probes(tmp_path) -> str:
    out = str(tmp_path / "results")
    _stored(out, "sweep-1", 1, seed=1)
    _stored(out, "sweep-2", 2, seed=2)
    _stored(out, "qualify-1", 3, command="qualify", spec={**SPEC, "min_bytes": 1 << 20})
    _stored(out, "watch-1", 4, command="watch", spec={**SPEC, "min_bytes": 1 << 20})
    return out


def test_the_latest_sweep_passes_over_newer_probes_and_says_which(tmp_path):
    out = _two_sweeps_then_probes(tmp_path)
    pick = dataset.latest_sweep(out)
    assert (pick.run_id, pick.runs, pick.passed_over) == ("sweep-2", 4, (("watch-1", "watch"), ("qualify-1", "qualify")))
    assert pick.note(out) == (f"run sweep-2: the latest sweep in {out} (passed over 1 watch, 1 qualify run(s) newer "
                              "than it, watch-1 the newest)")
    only = str(tmp_path / "one")
    _stored(only, "alone", 1)
    assert dataset.latest_sweep(only).note(only) is None  # one run: nothing to say
    probes = str(tmp_path / "probes")
    _stored(probes, "q1", 1, command="qualify")
    _stored(probes, "q2", 2, command="qualify")
    assert dataset.latest_sweep(probes).run_id == "q2"  # nothing but probes: the latest of them


def test_report_compare_and_predict_take_the_sweeps_after_a_qualify(tmp_path):
    out = _two_sweeps_then_probes(tmp_path)
    said = f"run sweep-2: the latest sweep in {out} (passed over 1 watch, 1 qualify run(s) newer than it, watch-1 the newest)"
    rep = run_main(["report", out, "--format", "json"])
    # healthy runs of 2% noise: nothing flagged
    assert rep.returncode == 0 and json.loads(rep.stdout)["run"]["run_id"] == "sweep-2", rep.stderr
    assert f"report: {said}\n" in rep.stderr
    cmp = run_main(["compare", out, "--format", "json"])
    summary = json.loads(cmp.stdout)["tables"]["summary"][0]
    assert cmp.returncode == 0 and summary["verdict"] == "unchanged", cmp.stderr
    assert (summary["baseline_runs"], summary["new_run"]) == (["sweep-1"], "sweep-2")
    assert f"collbench: compare: new {said}\n" in cmp.stderr
    pre = run_main(["predict", out, "--params", "1e9", "--dp", "4", "--ranks-per-node", "1", "--format", "json"])
    assert f"predict: {said}\n" in pre.stderr
    assert json.loads(pre.stdout)["tables"]["summary"][0]["run"] == "sweep-2", pre.stderr
    # a run named is taken as named, silently
    named = run_main(["report", out, "--run", "qualify-1", "--format", "json"])
    assert json.loads(named.stdout)["run"]["run_id"] == "qualify-1" and "latest" not in named.stderr


def test_compare_without_a_run_of_the_same_sweep_says_why_in_one_line(tmp_path):
    out = str(tmp_path / "results")
    _stored(out, "small", 1, spec={**SPEC, "max_bytes": 1 << 20})
    _stored(out, "large", 2, spec={**SPEC, "max_bytes": 1 << 30})
    proc = run_main(["compare", out])
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"collbench: error: {out}: no other run of the sweep of run large (run with the same options) to compare "
        "with among its 1 other run(s); name one with --baseline-run"]
    named = run_main(["compare", out, "--baseline-run", "small", "--format", "json"])
    summary = json.loads(named.stdout)["tables"]["summary"][0]
    # the same rows (the spec differs, the synthetic sizes do not): unchanged
    assert named.returncode == 0 and (summary["baseline_runs"], summary["verdict"]) == (["small"], "unchanged")


def test_report_compare_and_predict_read_results_when_no_folder_is_named(tmp_path, monkeypatch):
    """README's table says `collbench report` and `collbench compare` after `collbench run`: with no
    folder named they read `results`, where run writes; where there is none, one line says so."""
    _two_sweeps_then_probes(tmp_path)
    monkeypatch.chdir(tmp_path)
    rep = run_main(["report", "--format", "json"])
    assert rep.returncode == 0 and json.loads(rep.stdout)["run"]["run_id"] == "sweep-2", rep.stderr
    cmp = run_main(["compare", "--format", "json"])
    assert cmp.returncode == 0 and json.loads(cmp.stdout)["tables"]["summary"][0]["new_run"] == "sweep-2"
    pre = run_main(["predict", "--params", "1e9", "--dp", "4", "--ranks-per-node", "1", "--format", "json"])
    assert pre.returncode == 0 and json.loads(pre.stdout)["tables"]["summary"][0]["run"] == "sweep-2"
    monkeypatch.chdir(tmp_path / "results")  # a folder with no `results` in it
    for args in (["report"], ["compare"], ["predict", "--params", "1e9", "--dp", "4"]):
        proc = run_main(args)
        assert (proc.returncode, proc.stdout) == (2, "")
        assert proc.stderr == ("collbench: error: results: no such folder (`collbench run` writes to results; name "
                               "the folder it wrote to)\n")
