"""`ray job submit`, the way collbench reaches a cluster from outside it, against a token-authenticated
head (tests/raycluster.py, with its dashboard): a sweep submitted without waiting, watched through
Ray's job and state APIs while it measures, stopped with `ray job stop` (SIGTERM, SIGKILL 3 s later),
and its resume submitted the same way and waited for. Results written straight to object storage:
tests/integration/test_deploy.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from orchestrator.results import dataset

pytestmark = pytest.mark.lab
REPO = Path(__file__).resolve().parents[2]
RAY = os.path.join(os.path.dirname(sys.executable), "ray")


def test_a_submitted_sweep_is_stopped_cleanly_and_its_submitted_resume_finishes_it(tmp_path):
    """While it runs, Ray's state API shows the actors by name, with --env in their runtime_env; the
    manifest has the submission id; the stop leaves the manifest interrupted and the log says how to
    resume. The group measures for ~10 s (2,000 iterations of 5 ms), longer than what is asked of the
    head before the stop (through the APIs in this process, well under a second each)."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    from tests.raycluster import RayHead

    head = RayHead(dashboard=True)
    try:
        with open(head.auth_env["RAY_AUTH_TOKEN_PATH"]) as f:  # this process's clients of the head authenticate
            bearer = {"Authorization": f"Bearer {f.read().strip()}"}
        env = {**head.env(), "RAY_ADDRESS": head.dashboard_url}
        out = tmp_path / "results"
        job = subprocess.run(
            [RAY, "job", "submit", "--no-wait", "--submission-id", "cbstop", "--working-dir", str(REPO), "--",
             "python", "-m", "orchestrator", "run", "--collectives", "all_reduce", "-b", "4M", "-e", "4M", "-n", "2000",
             "--ranks-per-node", "2", "--patterns", "intra", "--env", "NCCL_ALGO=Ring", "--output", str(out)],
            capture_output=True, text=True, env=env, timeout=120, check=False,
        )
        assert job.returncode == 0, job.stderr[-2000:]
        client = JobSubmissionClient(head.dashboard_url, headers=bearer)
        deadline = time.monotonic() + 180
        while "# group r0-g0" not in client.get_job_logs("cbstop") and time.monotonic() < deadline:
            time.sleep(0.2)
        logs = client.get_job_logs("cbstop")
        assert "# group r0-g0" in logs, logs[-3000:]
        run_id = re.search(r"collbench: run (\S+) on", logs).group(1)
        # Ray's state API (what `ray list actors --detail` asks), over HTTP with the token
        ask = urllib.request.Request(f"{head.dashboard_url}/api/v0/actors?detail=1&limit=100&filter_keys=state"
                                     "&filter_predicates=%3D&filter_values=ALIVE", headers=bearer)
        with urllib.request.urlopen(ask, timeout=30) as answer:
            actors = json.load(answer)["data"]["result"]["result"]
        mine = {a["name"]: a for a in actors if (a.get("name") or "").startswith(f"collbench-{run_id}-")}
        assert set(mine) == {f"collbench-{run_id}-rank0", f"collbench-{run_id}-rank1"}, [a.get("name") for a in actors]
        assert all(json.loads(a["serialized_runtime_env"])["env_vars"]["NCCL_ALGO"] == "Ring" for a in mine.values())

        assert client.stop_job("cbstop")
        deadline = time.monotonic() + 60
        while client.get_job_status("cbstop") != JobStatus.STOPPED and time.monotonic() < deadline:
            time.sleep(0.2)
        assert client.get_job_status("cbstop") == JobStatus.STOPPED
        logs = client.get_job_logs("cbstop")
        assert f"collbench run --resume {run_id} --output {out}" in logs, logs[-3000:]
        record = dataset.manifest(str(out), run_id)
        assert record["state"] == "interrupted" and record["job_submission_id"] == "cbstop"

        resumed = subprocess.run(
            [RAY, "job", "submit", "--submission-id", "cbresume", "--working-dir", str(REPO), "--",
             "python", "-m", "orchestrator", "run", "--resume", run_id, "--output", str(out)],
            capture_output=True, text=True, env=env, timeout=300, check=False,
        )
        assert client.get_job_status("cbresume") == JobStatus.SUCCEEDED, resumed.stdout[-3000:] + resumed.stderr[-3000:]
        logs = client.get_job_logs("cbresume")
        assert f"results -> {out}" in logs and "[progress] 1/1 groups done" in logs, logs[-3000:]
        df = dataset.load(str(out))
        assert list(df.group_id) == ["r0-g0"] and (df.status == "ok").all() and (df.n_wrong == 0).all()
        assert dataset.manifest(str(out), run_id)["state"] == "finished"  # the stopped group, measured once
    finally:
        head.stop()
