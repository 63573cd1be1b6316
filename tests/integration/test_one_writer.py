"""One writer per run, end to end: two `collbench run --resume ID` started together on one cluster;
one resumes, the other is refused in one line naming it, before joining Ray."""

from __future__ import annotations

import socket
import subprocess
import sys

import pandas as pd

from tests.helpers import run_cli

SWEEP = ["--collectives", "all_reduce", "-b", "1K", "-e", "4K", "-n", "2", "--ranks-per-node", "2",
         "--patterns", "intra", "--no-concurrent"]


def test_two_resumes_of_one_run_at_once(ray_head, tmp_path):
    out = tmp_path / "results"
    first = run_cli(["run", *SWEEP, "--output", str(out)], env=ray_head.env())
    assert first.returncode == 0, first.stderr[-2000:]
    before = pd.read_parquet(out)
    run_id = before.run_id.iloc[0]
    cmd = [sys.executable, "-m", "orchestrator", "run", "--resume", run_id, "--output", str(out)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ray_head.env())
             for _ in range(2)]
    ends = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], [e[1][-2000:] for e in ends]
    loser = next(k for k, p in enumerate(procs) if p.returncode == 2)
    winner = procs[1 - loser]
    lines = ends[loser][1].strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"collbench: error: run {run_id} in {out} is being written by host "
                               f"{socket.gethostname()} pid {winner.pid} since "), lines[0]
    assert f"collbench: run {run_id}" not in ends[loser][0]  # refused before it joined Ray
    after = pd.read_parquet(out)
    key = ["group_id", "msg_bytes"]
    assert sorted(map(tuple, after[key].values)) == sorted(map(tuple, before[key].values))  # each row once
    assert sorted(p.name for p in (out / "_runs").iterdir()) == [f"{run_id}.json"]  # the lock is gone
