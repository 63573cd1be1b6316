"""Real faults injected from outside (no hooks in the product): a hung rank (SIGSTOP), a dead rank
(SIGKILL), a killed driver followed by --resume, and Ctrl-C. Each test checks the rows on disk."""

from __future__ import annotations

import os
import signal
import time

import pandas as pd
import pytest

from orchestrator.results import dataset
from tests.faults import LiveRun, worker_pids
from tests.helpers import run_cli

# ~1-3 s of work per group on this machine; groups: intra r0-g0 (ranks 0,1), r1-g0 (ranks 0,1,2)
SWEEP = ["--collectives", "all_reduce", "-b", "1M", "-e", "1M", "-n", "600", "-w", "1", "-c", "1"]


def _inject(ray_head, tmp_path, sig: int, timeout_s: int):
    out = tmp_path / "results"
    run = LiveRun(["run", "--ranks-per-node", "3", "--group-timeout", str(timeout_s), "--deadline-rate", "10",
                   "--output", str(out), *SWEEP], env=ray_head.env())
    victim = None
    try:
        t_group = run.wait_for("# group r0-g0", timeout=120)
        deadline = time.monotonic() + 30
        while victim is None and time.monotonic() < deadline:
            busy = worker_pids(executing="run")
            victim = next(iter(busy), None)
            time.sleep(0.05)
        assert victim, "no worker was measuring"
        os.kill(victim, sig)
        t_fail = run.wait_for("group r0-g0:", timeout=timeout_s + 60)
        rc = run.finish(timeout=180)
    finally:
        if victim and sig == signal.SIGSTOP:
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                pass
        run.kill()
    df = pd.read_parquet(out)
    return run, rc, df, victim, t_fail - t_group


def test_hung_rank_times_out_and_the_next_group_runs(ray_head, tmp_path):
    run, rc, df, victim, elapsed = _inject(ray_head, tmp_path, signal.SIGSTOP, timeout_s=15)
    assert rc == 1  # a failure and no --allow-failures
    # the case's deadline (README: Reliability): --group-timeout plus its bytes at --deadline-rate,
    # here 602 iterations moving 2 x 1 MiB at 10 GB/s; it fires within the deadline plus a margin
    limit = 15 + 602 * 2 * 2**20 / 10e9
    assert limit - 1 <= elapsed <= limit + 10, elapsed
    first = df[df.group_id == "r0-g0"]
    assert list(first.status) == ["timeout"]
    row = first.iloc[0]
    victim_rank = list(row.pids).index(victim)
    other = 1 - victim_rank
    # the stopped rank does not answer a ping, its peer does: the culprit is named, not both
    assert list(row.failed_ranks) == [victim_rank]
    assert f"deadline of {limit:.1f}s passed during measure" in row.error
    assert (f"ranks {victim_rank} on {row.hosts[victim_rank]} ({row.node_ips[victim_rank]}) do not answer "
            f"(stopped or dead), ranks {other} wait for them") in row.error
    second = df[df.group_id == "r1-g0"]
    assert list(second.status) == ["ok"] and second.n_wrong.iloc[0] == 0
    assert victim not in list(second.pids.iloc[0])  # a fresh worker took the hung one's slot
    assert "timeout: deadline of" in "".join(run.stderr)  # the failure summary


def test_killed_rank_fails_its_group_and_the_run_goes_on(ray_head, tmp_path):
    run, rc, df, victim, elapsed = _inject(ray_head, tmp_path, signal.SIGKILL, timeout_s=60)
    assert rc == 1
    assert elapsed < 30  # noticed at once, not at the deadline
    row = df[df.group_id == "r0-g0"].iloc[0]
    assert row.status == "failed"
    victim_rank = list(row.pids).index(victim)
    assert list(row.failed_ranks) == [victim_rank]
    assert f"rank {victim_rank} on" in row.error and "Actor" in row.error
    second = df[df.group_id == "r1-g0"].iloc[0]
    assert second.status == "ok" and victim not in list(second.pids)
    summary = "".join(run.stderr)
    assert f"[ranks {row.ranks[victim_rank]} on" in summary and "failed: rank" in summary

    # --resume counts the failed group as done; with --retry-failed it is measured again
    out, run_id = tmp_path / "results", df.run_id.iloc[0]
    again = run_cli(["run", "--resume", run_id, "--output", str(out)], env=ray_head.env(), timeout=300)
    assert again.returncode == 0 and "resuming: 2 group(s) already on disk are skipped" in again.stdout
    assert pd.read_parquet(out).set_index("group_id").status.to_dict() == {"r0-g0": "failed", "r1-g0": "ok"}
    retry = run_cli(["run", "--resume", run_id, "--retry-failed", "--output", str(out)], env=ray_head.env(),
                    timeout=300)
    assert retry.returncode == 0, retry.stderr[-2000:]
    assert "resuming: 1 group(s) already on disk are skipped (failed, timed-out and skipped ones are measured again)" \
        in retry.stdout
    df = pd.read_parquet(out)
    assert sorted(df.group_id) == ["r0-g0", "r1-g0"] and (df.status == "ok").all() and (df.n_wrong == 0).all()


def _groups_on_disk(out):
    run_dirs = [p for p in out.iterdir() if not p.name.startswith("_")]
    assert len(run_dirs) == 1
    return run_dirs[0].name, sorted(p.name for p in run_dirs[0].glob("*.parquet"))


def _signal_driver_after_first_group(ray_head, out, sig: int) -> LiveRun:
    """A 3-group run whose driver gets `sig` once the first group is on disk."""
    args = ["run", "--ranks-per-node", "4", "--patterns", "intra", "--no-concurrent", "--output", str(out),
            *SWEEP[:-6], "-n", "300", "-w", "1", "-c", "1"]
    run = LiveRun(args, env=ray_head.env())
    try:
        run.wait_for("[progress] 1/3 groups done", timeout=180)
        run.proc.send_signal(sig)
        run.returncode = run.finish(timeout=60)
    finally:
        run.kill()
    return run


def test_killed_driver_then_resume_measures_each_group_once(ray_head, tmp_path):
    out = tmp_path / "results"
    _signal_driver_after_first_group(ray_head, out, signal.SIGKILL)
    run_id, before = _groups_on_disk(out)
    assert 1 <= len(before) < 3
    pd.read_parquet(out)  # everything on disk is readable
    proc = run_cli(["run", "--resume", run_id, "--output", str(out)], env=ray_head.env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"resuming: {len(before)} group(s) already on disk are skipped" in proc.stdout
    _, after = _groups_on_disk(out)
    assert after == ["part-00000.parquet"]  # the finished run, compacted
    df = pd.read_parquet(out)
    assert len(df) == 3 and df.group_id.is_unique and (df.status == "ok").all()
    assert sorted(df.group_id) == ["r0-g0", "r1-g0", "r2-g0"]
    assert set(df.run_id) == {run_id}


def test_ctrl_c_saves_finished_groups_and_says_how_to_resume(ray_head, tmp_path):
    out = tmp_path / "results"
    run = _signal_driver_after_first_group(ray_head, out, signal.SIGINT)
    assert run.returncode == 130
    run_id, files = _groups_on_disk(out)
    assert "r0-g0.parquet" in files
    assert f"collbench run --resume {run_id} --output {out}" in "".join(run.stderr)
    assert dataset.manifest(str(out), run_id)["state"] == "interrupted"
    assert (pd.read_parquet(out).status == "ok").all()
    time.sleep(1)
    assert not worker_pids()  # actors released


@pytest.mark.parametrize(
    "config, message",
    [
        ("collectives: []\n", "--collectives: empty list"),
        ("group_sizes: [2, 7]\n", "--group-sizes 7: no intra/inter/mixed group of that many ranks"),
        ("max_bytes: 64G\n", "--max-bytes 64G: each rank needs about"),
        ("patterns: [intra, mixed]\n", "--patterns mixed: needs at least 2 nodes, the cluster has 1"),
    ],
)
def test_bad_config_for_this_cluster(ray_head, tmp_path, config, message):
    cfg = tmp_path / "sweep.yaml"
    cfg.write_text(config)
    proc = run_cli(["run", "--config", str(cfg), "--output", str(tmp_path / "out")], env=ray_head.env())
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert message in lines[-1] and lines[-1].startswith("collbench: error:")
    assert not (tmp_path / "out").exists() and not worker_pids()
