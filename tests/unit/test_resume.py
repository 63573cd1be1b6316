"""--resume without Ray: run ids are names, a resumed run keeps its own sweep, a cluster is the
run's by its places and rank counts (not Ray's node ids), and the printed command carries --address."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from orchestrator.errors import UsageError
from orchestrator.results import dataset
from orchestrator.results.store import ResultStore
from orchestrator.sweep import resume
from orchestrator.sweep.inventory import Inventory, Node
from orchestrator.sweep.spec import SweepSpec, for_backend
from tests.helpers import run_main

RUN = "20261201T100000Z-abc123"


@pytest.mark.parametrize("run_id", ["../../x", "", "a/b", "..", ".", ".hidden", "_runs", "x\0y", "a b", "x\n",
                                    "/abs", "-b", "ü", "x" * 129])
def test_a_run_id_that_is_not_a_name_is_refused_before_anything_is_written(tmp_path, run_id):
    out = tmp_path / "results"
    proc = run_main(["run", f"--resume={run_id}", "--output", str(out)])
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"collbench: error: --resume {run_id!r}: not a run id")
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("run_id", [RUN, "a", "run-1.b_2", "x" * 128])
def test_names_are_run_ids(run_id):
    resume.check_run_id(run_id)


def _saved(tmp_path, **spec) -> str:
    """A manifest of a run on one node of 4 ranks, as `collbench run` writes it."""
    out = str(tmp_path / "results")
    store = ResultStore(out, RUN)
    store.create()
    inv = [{"node_id": "aa" * 28, "ip": "10.0.0.1", "hostname": "h", "gpus": 0, "ranks": 4}]
    store.write_manifest({"state": "interrupted", "backend": "gloo", "groups_total": 3, "groups_done": 1,
                          "spec": json.dumps(SweepSpec(min_bytes=1024, max_bytes=4096, ranks_per_node=4,
                                                       dtypes=("float32", "int32"), **spec).to_json()),
                          "inventory": json.dumps(inv)})
    return out


def test_resuming_with_options_that_change_the_sweep_is_refused_naming_each(tmp_path):
    out = _saved(tmp_path)
    before = sorted(p for p, _, _ in os.walk(tmp_path)), sorted(f for _, _, fs in os.walk(tmp_path) for f in fs)
    proc = run_main(["run", "--resume", RUN, "--output", out, "-b", "8", "--iters", "20", "-e", "4K",
                     "--ranks-per-node", "2"])
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        (f"collbench: error: --resume {RUN}: --min-bytes 8 (the run's: 1K), --ranks-per-node 2 (the run's: 4): a "
         "resumed run measures its own sweep; drop these options, or start a new run")
    ]  # -n 20 and -e 4K are the run's own values: not refused
    # nothing written by the refused resume
    assert (sorted(p for p, _, _ in os.walk(tmp_path)), sorted(f for _, _, fs in os.walk(tmp_path) for f in fs)) \
        == before


def test_a_config_file_counts_as_options(tmp_path):
    out = _saved(tmp_path)
    cfg = tmp_path / "sweep.yaml"
    cfg.write_text("collectives: [all_gather]\n")
    proc = run_main(["run", "--resume", RUN, "--output", out, "--config", str(cfg)])
    assert proc.returncode == 2 and "--collectives all_gather (the run's: all_reduce," in proc.stderr


def test_resumed_spec_keeps_the_sweep_and_takes_what_may_change(tmp_path):
    saved = resume.saved_run(dataset.manifest(_saved(tmp_path), RUN), RUN)
    assert saved.nodes == (("10.0.0.1", 4),) and saved.backend == "gloo"
    today = SweepSpec(output="/elsewhere", address="10.0.0.9:6379", group_timeout_s=900.0, allow_failures=True,
                      dtypes=("int32", "float32"), min_bytes=1024)
    spec = resume.resumed_spec(saved, today, {"group_timeout_s", "allow_failures", "address", "min_bytes"}, RUN)
    assert spec.min_bytes == 1024 and spec.ranks_per_node == 4 and spec.deadline_rate_gbps == 0.1
    assert spec.wait_nodes is None  # a field unset by default reads back unset (the saved JSON's null)
    assert (spec.output, spec.address, spec.group_timeout_s, spec.allow_failures) == \
        ("/elsewhere", "10.0.0.9:6379", 900.0, True)
    with pytest.raises(UsageError, match=r"--dtypes int32,float32 \(the run's: float32,int32\): a resumed run"):
        resume.resumed_spec(saved, today, {"dtypes"}, RUN)


def test_dtypes_all_is_the_runs_own_list_when_it_expands_the_same_on_its_backend(tmp_path):
    gloo_all = for_backend(SweepSpec(dtypes=("all",)), "gloo").dtypes
    saved = resume.saved_run(dataset.manifest(_saved(tmp_path), RUN), RUN)
    saved = dataclasses.replace(saved, spec=dataclasses.replace(saved.spec, dtypes=gloo_all))
    assert resume.resumed_spec(saved, SweepSpec(dtypes=("all",)), {"dtypes"}, RUN).dtypes == gloo_all


def _inv(*nodes: tuple[str, str, int]) -> Inventory:
    return Inventory(tuple(Node(node_id, ip, "h", 0, ranks) for node_id, ip, ranks in nodes))


def test_one_node_of_the_same_rank_count_is_the_same_cluster():
    # an embedded instance: a new Ray node id each start, and perhaps a new address
    assert resume.cluster_change((("10.0.0.1", 4),), _inv(("new-id", "10.0.0.7", 4))) is None
    assert resume.cluster_change((("10.0.0.1", 4),), _inv(("new-id", "10.0.0.1", 2))) == \
        "its node held 4 rank(s), this cluster's node holds 2"


def test_several_nodes_are_matched_by_address_and_rank_count_not_node_id():
    saved = (("10.0.0.1", 8), ("10.0.0.2", 8))
    assert resume.cluster_change(saved, _inv(("x", "10.0.0.1", 8), ("y", "10.0.0.2", 8))) is None
    assert resume.cluster_change(saved, _inv(("x", "10.0.0.1", 8), ("y", "10.0.0.3", 8))) == \
        "2 node(s) then, 2 now; gone: 10.0.0.2 (8 rank(s)); new: 10.0.0.3 (8 rank(s))"
    assert resume.cluster_change(saved, _inv(("x", "10.0.0.1", 8))) == \
        "2 node(s) then, 1 now; gone: 10.0.0.2 (8 rank(s))"
    assert resume.cluster_change(saved, _inv(("x", "10.0.0.1", 8), ("y", "10.0.0.2", 4))) == \
        "2 node(s) then, 2 now; gone: 10.0.0.2 (8 rank(s)); new: 10.0.0.2 (4 rank(s))"


def test_the_resume_command_carries_the_address(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert resume.resume_command(RUN, "/r s", None) == f"collbench run --resume {RUN} --output '/r s'"
    assert resume.resume_command(RUN, "/r", "10.0.0.1:6379").endswith("--output /r --address 10.0.0.1:6379")
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.2:6379")
    assert resume.resume_command(RUN, "/r", None).endswith("--output /r --address 10.0.0.2:6379")


def test_the_api_resumes_as_the_command_line_does(tmp_path, monkeypatch):
    """Issue 43: resume lived in the command alone. Both faces now build RunOptions and call one
    operation: the same resumed sweep reaches the body, and the same refusal comes back."""
    out = _saved(tmp_path)
    from orchestrator import api
    from orchestrator.execution import jobs

    reached = []
    monkeypatch.setattr(jobs, "sweep", lambda spec, **kw: reached.append((spec, kw["run_id"], kw["retry_failed"]))
                        or (_ for _ in ()).throw(UsageError("stop here")))
    cli = run_main(["run", "--resume", RUN, "--output", out, "--retry-failed", "--group-timeout", "900"])
    assert cli.returncode == 2 and cli.stderr == "collbench: error: stop here\n"
    with pytest.raises(UsageError, match="^stop here$"):
        api.run(resume=RUN, output=out, retry_failed=True, group_timeout="900")
    assert len(reached) == 2 and reached[0] == reached[1]
    spec, run_id, retry = reached[0]
    assert (run_id, retry, spec.min_bytes, spec.ranks_per_node, spec.group_timeout_s) == (RUN, True, 1024, 4, 900.0)
    with pytest.raises(UsageError, match=rf"^--resume {RUN}: --min-bytes 8 \(the run's: 1K\): a resumed run measures"):
        api.run(resume=RUN, output=out, min_bytes=8)
    with pytest.raises(UsageError, match=rf"^--resume {RUN}: --min-bytes 8 \(the run's: 1K\): a resumed run measures"):
        api.run(SweepSpec(min_bytes=8), resume=RUN, output=out)  # a field the caller's sweep sets counts as given
    with pytest.raises(UsageError, match=r"^--retry-failed: only with --resume RUN_ID"):
        api.run(retry_failed=True, output=out)
    assert len(reached) == 2


def test_inside_a_slurm_job_the_resume_command_names_no_address():
    """Issue 44: the line said the old allocation's head; the next job's Ray has another, which its
    own $RAY_ADDRESS (or --address) names."""
    slurm = {"SLURM_JOB_ID": "4242", "RAY_ADDRESS": "10.0.0.2:6379"}
    assert resume.resume_command(RUN, "/r", "10.0.0.1:6379", slurm) == f"collbench run --resume {RUN} --output /r"
    assert resume.resume_command(RUN, "/r", None, slurm) == f"collbench run --resume {RUN} --output /r"
    assert resume.resume_command(RUN, "/r", None, {"RAY_ADDRESS": "10.0.0.2:6379"}).endswith("--address 10.0.0.2:6379")
