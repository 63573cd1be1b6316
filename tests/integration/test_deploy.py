"""Results written straight to object storage (a local S3-compatible server), and where a relative
--output goes under a Ray job (`ray job submit` itself, with `ray job stop` and the resume:
tests/lab/test_job_submit.py)."""

from __future__ import annotations

import json
import os

from orchestrator.results import dataset
from orchestrator.results.location import resolve_output
from tests.faults import worker_pids
from tests.helpers import run_cli


def test_relative_output_under_a_ray_job_goes_home(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert resolve_output("results") == str(tmp_path / "results")
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", "{}")
    assert resolve_output("results") == os.path.join(os.path.expanduser("~"), "results")
    assert resolve_output("/abs/x") == "/abs/x" and resolve_output("s3://b/p") == "s3://b/p"


def test_results_to_object_storage(ray_head, s3_server, monkeypatch):
    query, creds = s3_server
    uri = f"s3://cbresults/sweeps/a{query}"
    env = {**ray_head.env(), **creds}
    proc = run_cli(["run", "--collectives", "all_reduce", "-b", "1K", "-e", "4K", "-n", "2", "--output", uri], env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for k, v in creds.items():
        monkeypatch.setenv(k, v)
    df = dataset.load(uri)
    assert len(df) == 2 and (df.status == "ok").all()
    rep = run_cli(["report", uri, "--format", "json"], env=env)
    assert rep.returncode == 0, rep.stdout + rep.stderr  # one group, two rows: nothing to flag
    assert [r["size"] for r in json.loads(rep.stdout)["tables"]["busbw"]] == ["1K", "4K"]

    bad = run_cli(["run", "--output", f"s3://nosuchbucket/x{query}"], env=env)
    assert bad.returncode == 2 and "bucket nosuchbucket does not exist" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and not worker_pids()
    no_creds = {k: v for k, v in env.items() if not k.startswith("AWS_ACCESS") and not k.startswith("AWS_SECRET")}
    bad = run_cli(["run", "--output", uri], env={**no_creds, "AWS_EC2_METADATA_DISABLED": "true"})
    assert bad.returncode == 2 and "cannot write there" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
