"""How users run it on clusters: `ray job submit` against a token-authenticated head, and results
written straight to object storage (a local S3-compatible server)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from orchestrator.results import dataset
from orchestrator.results.location import resolve_output
from tests.faults import worker_pids
from tests.helpers import run_cli

REPO = Path(__file__).resolve().parents[2]
RAY = os.path.join(os.path.dirname(sys.executable), "ray")


def test_ray_job_submit_end_to_end(tmp_path):
    from tests.raycluster import RayHead

    head = RayHead(dashboard=True)
    try:
        env = {**head.env(), "RAY_ADDRESS": head.dashboard_url}
        out = tmp_path / "results"
        sub = subprocess.run(
            [RAY, "job", "submit", "--submission-id", "cbjob1", "--working-dir", str(REPO), "--",
             "python", "-m", "orchestrator", "run", "--collectives", "all_reduce,all_gather", "-b", "1K", "-e", "16K",
             "-n", "3", "--output", str(out)],
            capture_output=True, text=True, env=env, timeout=300,
        )
        status = subprocess.run([RAY, "job", "status", "cbjob1"], capture_output=True, text=True, env=env, timeout=60)
        assert "job 'cbjob1' succeeded" in (status.stdout + status.stderr).lower(), sub.stdout[-3000:] + sub.stderr[-3000:]
        logs = subprocess.run([RAY, "job", "logs", "cbjob1"], capture_output=True, text=True, env=env, timeout=60).stdout
        assert f"results -> {out}" in logs and "[progress] 1/1 groups done" in logs
        df = dataset.load(str(out))
        assert len(df) == 3 * 3 and (df.status == "ok").all() and (df.n_wrong == 0).all()  # 3 sizes x 3 cases
    finally:
        head.stop()


def test_ray_job_stop_interrupts_cleanly_and_the_run_resumes(tmp_path):
    """`ray job stop` sends SIGTERM (and SIGKILL 3 s later): the manifest says interrupted, the
    log says how to resume, and the resumed run finishes. While it runs, Ray's state API shows
    the actors by name, with --env in their runtime_env; the manifest has the submission id. The
    group measures for ~40 s (8,000 iterations of 5 ms at nice 0 on this host), longer than the
    `ray` calls before the stop take on a loaded host (3,000 finished first there, in 16 s)."""
    from tests.raycluster import RayHead

    head = RayHead(dashboard=True)
    try:
        env = {**head.env(), "RAY_ADDRESS": head.dashboard_url}
        out = tmp_path / "results"
        job = subprocess.run(
            [RAY, "job", "submit", "--no-wait", "--submission-id", "cbstop", "--working-dir", str(REPO), "--",
             "python", "-m", "orchestrator", "run", "--collectives", "all_reduce", "-b", "4M", "-e", "4M", "-n", "8000",
             "--ranks-per-node", "2", "--patterns", "intra",
             "--env", "NCCL_ALGO=Ring", "--output", str(out)],
            capture_output=True, text=True, env=env, timeout=120,
        )
        assert job.returncode == 0, job.stderr[-2000:]

        def logs() -> str:
            return subprocess.run([RAY, "job", "logs", "cbstop"], capture_output=True, text=True, env=env,
                                  timeout=60).stdout

        deadline = time.monotonic() + 180
        while "# group r0-g0" not in logs() and time.monotonic() < deadline:
            time.sleep(1)
        assert "# group r0-g0" in logs(), logs()[-3000:]
        run_id = re.search(r"collbench: run (\S+) on", logs()).group(1)
        listed = subprocess.run([RAY, "list", "actors", "--detail", "--format", "json", "--filter", "state=ALIVE",
                                 "--address", head.dashboard_url], capture_output=True, text=True, env=env, timeout=60)
        assert listed.stdout.lstrip().startswith("["), listed.stdout[-2000:] + listed.stderr[-2000:]
        actors = json.loads(listed.stdout)
        mine = {a["name"]: a for a in actors if (a.get("name") or "").startswith(f"collbench-{run_id}-")}
        assert set(mine) == {f"collbench-{run_id}-rank0", f"collbench-{run_id}-rank1"}, listed.stdout[-2000:]
        assert all(json.loads(a["serialized_runtime_env"])["env_vars"]["NCCL_ALGO"] == "Ring" for a in mine.values())

        stop = subprocess.run([RAY, "job", "stop", "cbstop"], capture_output=True, text=True, env=env, timeout=120)
        assert "stopped" in (stop.stdout + stop.stderr).lower(), stop.stdout + stop.stderr
        text = logs()
        assert f"collbench run --resume {run_id} --output {out}" in text, text[-3000:]
        record = dataset.manifest(str(out), run_id)
        assert record["state"] == "interrupted" and record["job_submission_id"] == "cbstop"

        resumed = run_cli(["run", "--resume", run_id, "--output", str(out)], env=head.env(), timeout=300)
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        df = dataset.load(str(out))
        assert list(df.group_id) == ["r0-g0"] and (df.status == "ok").all()  # the stopped group, measured once
        assert dataset.manifest(str(out), run_id)["state"] == "finished"
    finally:
        head.stop()


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
