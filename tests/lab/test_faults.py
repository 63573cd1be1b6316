"""Real faults injected from outside (no hooks in the product), each signal once, on this module's
Ray head or an embedded instance (no namespaces): a hung rank (SIGSTOP), a dead rank (SIGKILL), the
driver killed outright (SIGKILL), Ctrl-C (SIGINT), SIGTERM as scancel and a time limit send it, a full
disk; and SIGUSR1 to a qualification, on the shared four-node lab. Each test checks the rows on disk
and the resume. SIGUSR1 to a sweep, ahead of a time limit: under the real Slurm
(tests/lab/test_slurm.py). Bad configurations for the cluster stay in the integration tier
(tests/integration/test_run.py)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shlex
import signal
import subprocess
import time

import pandas as pd
import pytest

from orchestrator.results import dataset
from orchestrator.results.store import CUT_SHORT
from tests.faults import LiveRun, worker_pids
from tests.helpers import run_cli


@pytest.fixture(scope="module")
def ray_head():
    """This module's own Ray head (the session's, tests/conftest.py, would stay up, idle but costing
    this 2-core host CPU, through the rest of the lab tier)."""
    from tests.raycluster import RayHead

    head = RayHead()
    yield head
    head.stop()


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
    # here 1 warm-up, 2 x 600 timed (per call, then the batch: planner.case_deadline_s) and 1 check
    # iteration, each moving 2 x 1 MiB at 10 GB/s; it fires within the deadline plus a margin
    limit = 15 + (1 + 2 * 600 + 1) * 2 * 2**20 / 10e9
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


# 3 groups, one at a time: intra r0-g0 (ranks 0,1), r1-g0 (0-3), r2-g0 (0-3)
THREE_GROUPS = ["run", "--ranks-per-node", "4", "--patterns", "intra", "--no-concurrent", *SWEEP[:-6],
                "-n", "300", "-w", "1", "-c", "1"]


def test_ctrl_c_in_a_group_keeps_its_finished_cases_and_resume_measures_it_whole(ray_head, tmp_path):
    """Issue 45: Ctrl-C during a one-group run said "finished groups are saved" and saved none. The
    group's first case (all_reduce) is done when the signal comes, its second (all_gather) is not:
    the all_reduce rows are kept, the all_gather ones are rows saying the interrupt cut them, the
    closing line counts that, the report reads the run, and --resume measures the group whole."""
    out = tmp_path / "results"
    run = LiveRun(["run", "--ranks-per-node", "2", "--patterns", "intra", "--collectives", "all_reduce,all_gather",
                   "-b", "1M", "-e", "1M", "-n", "1200", "-w", "1", "-c", "1", "--output", str(out)],
                  env=ray_head.env())
    run.signal_when("all_reduce", signal.SIGINT, pause_s=0.5)  # all_reduce's row, printed as the case ends
    assert run.returncode == 130, "".join(run.stderr)[-2000:]
    run_id, files = _groups_on_disk(out)
    assert files == ["r0-g0.parquet"]
    df = pd.read_parquet(out)
    kept = df[df.status == "ok"]
    assert list(kept.collective) == ["all_reduce"] and (kept.n_wrong == 0).all()
    cut = df[df.status != "ok"]
    # all_gather's cases (in place and out of place), each a row saying the interrupt cut it
    assert set(cut.collective) == {"all_gather"} and cut.error.str.startswith("not measured: the run was "
                                                                              "interrupted").all()
    said = "".join(run.stderr)
    assert f"interrupted; 0 group(s) and the finished sizes of 1 group(s) in flight saved in {out}" in said, said
    assert "1 measurement(s)" in said
    # a run on a named cluster ($RAY_ADDRESS here) is resumed there
    assert _resume_command(run) == ["collbench", "run", "--resume", run_id, "--output", str(out),
                                    "--address", ray_head.address]
    manifest = dataset.manifest(str(out), run_id)
    assert (manifest["state"], manifest["groups_total"], manifest["groups_done"]) == ("interrupted", 1, 0)
    deadline = time.monotonic() + 30
    while worker_pids() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not worker_pids()  # actors released
    report = run_cli(["report", str(out), "--run", run_id, "--format", "json"])
    read = json.loads(report.stdout)
    # the run reads, and the cases the interrupt cut are its one failure: exit 1, said as skipped
    assert report.returncode == 1 and read["run"]["run_id"] == run_id, report.stderr[-2000:]
    assert [(r["group_id"], r["status"], r["error"].split(" (")[0]) for r in read["tables"]["failures"]] == \
        [("r0-g0", "skipped", "not measured: the run was interrupted in this group")], read["tables"]["failures"]
    resumed = run_cli(_resume_command(run)[1:], env=ray_head.env(), timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming: 0 group(s) already on disk are skipped" in resumed.stdout
    df = pd.read_parquet(out)
    assert set(df.collective) == {"all_gather", "all_reduce"} and (df.status == "ok").all()
    assert len(df) == len(kept) + len(cut)  # each case once: the resumed group replaced the cut one


def _resume_command(run: LiveRun) -> list[str]:
    """The resume command the driver printed last on stderr, as words."""
    lines = [line.strip() for line in run.stderr if line.strip().startswith("collbench run --resume")]
    assert lines, "".join(run.stderr)[-2000:]
    return shlex.split(lines[-1])


def _embedded_env() -> dict:
    return {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}


def test_sigterm_ends_an_embedded_named_run_and_the_same_command_resumes_it(tmp_path):
    """SIGTERM, what scancel and a time limit send, to README's default mode (no cluster named: each
    start is its own Ray instance, with new node ids) under a name, as a requeued batch job runs the
    same command again (--run-id slurm-$SLURM_JOB_ID; issue 44): exit 143, the manifest interrupted,
    the resume command printed (embedded: no --address); the same command again resumes the run (only
    the groups it lacks, on the same one-node shape), and a third start, after it finished, measures
    nothing and says so (exit 0)."""
    out = tmp_path / "results"
    named = [*THREE_GROUPS, "--output", str(out), "--run-id", "slurm-4242"]
    run = LiveRun(named, env=_embedded_env())
    run.signal_when("[progress] 1/3 groups done", signal.SIGTERM)
    assert run.returncode == 143, "".join(run.stderr)[-2000:]
    run_id, files = _groups_on_disk(out)
    assert run_id == "slurm-4242" and 1 <= len(files) < 3
    manifest = dataset.manifest(str(out), run_id)
    assert (manifest["state"], manifest["groups_done"]) == ("interrupted", len(files))
    assert _resume_command(run) == ["collbench", "run", "--resume", run_id, "--output", str(out)]

    again = run_cli(named, env=_embedded_env(), timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"resuming: {len(files)} group(s) already on disk are skipped" in again.stdout
    assert _groups_on_disk(out)[1] == ["part-00000.parquet"]  # the finished run, compacted
    df = pd.read_parquet(out)
    assert sorted(df.group_id) == ["r0-g0", "r1-g0", "r2-g0"] and (df.status == "ok").all()  # each group once
    assert set(df.run_id) == {run_id}
    manifest = dataset.manifest(str(out), run_id)
    assert (manifest["state"], manifest["groups_done"], manifest["groups_total"]) == ("finished", 3, 3)
    third = run_cli(named, env=_embedded_env(), timeout=300)
    said = (f"collbench: run slurm-4242 in {out} finished already: nothing measured again "
            "(a new run needs another --run-id)\n")
    assert third.returncode == 0 and third.stdout == said, third.stderr
    assert len(pd.read_parquet(out)) == 3


@contextlib.contextmanager
def _small_disk(path, size: str):
    """A tmpfs of `size` at `path`, for as long as the block runs (root only)."""
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             check=False, capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def _fill(directory, leave_bytes: int):
    """Fill the filesystem of `directory` but `leave_bytes`: room for a manifest, not for a group's rows."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as e:
            assert e.errno == errno.ENOSPC
    os.truncate(filler, max(0, os.path.getsize(filler) - leave_bytes))
    return filler


def test_a_full_disk_stops_the_run_in_one_line_and_keeps_every_row_written(ray_head, tmp_path):
    with _small_disk(tmp_path / "disk", "4m") as disk:
        out = disk / "results"
        # 6 sizes: a group's rows take more room than the test leaves
        run = LiveRun([*THREE_GROUPS, "-b", "1K", "-n", "100", "--output", str(out)], env=ray_head.env())
        try:
            run.wait_for("[progress] 1/3 groups done", timeout=180)
            manifest_bytes = next((out / "_runs").glob("*.json")).stat().st_size
            _fill(disk, leave_bytes=2 * manifest_bytes + 8192)
            rc = run.finish(timeout=120)
        finally:
            run.kill()
        stderr = "".join(run.stderr)
        assert rc == 1 and "Traceback" not in stderr, stderr[-3000:]
        run_id, files = _groups_on_disk(out)
        group_bytes = min((out / run_id / f).stat().st_size for f in files)
        assert group_bytes > 2 * manifest_bytes + 8192, "the test's group files must not fit in what it leaves"
        manifest = dataset.manifest(str(out), run_id)
        assert (manifest["state"], manifest["groups_done"]) == ("interrupted", len(files))
        last = stderr.strip().splitlines()[-1]
        assert re.fullmatch(
            rf"collbench: error: no space left on device writing {re.escape(str(out / run_id))} \(\d+(\.\d+)?[KMGT]? "
            rf"free\); {len(files)} finished group\(s\) kept in {re.escape(str(out))}; resume once there is room: "
            rf"collbench run --resume {run_id} --output {re.escape(str(out))} --address {ray_head.address}", last), last
        df = pd.read_parquet(out)  # every row written so far, readable, each once
        assert df.groupby("group_id").size().to_dict() == {f.removesuffix(".parquet"): 6 for f in files}
        assert not [p.name for p in out.rglob(".*")]  # no torn temporary file left behind


def test_a_driver_killed_outright_loses_only_the_size_in_flight(ray_head, tmp_path):
    """Issue 45: a crash (the driver killed outright: no signal handler, nothing flushed) lost every
    size of the groups in flight. A size is one call on each rank (runner.one_size_each), and a group
    in flight writes its finished sizes as it goes (at most once a second, runner.CHECKPOINT_S):
    killed while all_reduce's 2M runs, its 1M row is on disk, the sizes not measured are rows saying
    the run was cut there, and --resume measures the group whole, each size once."""
    out = tmp_path / "results"
    run = LiveRun(["run", "--ranks-per-node", "2", "--patterns", "intra", "--collectives", "all_reduce,all_gather",
                   "-b", "1M", "-e", "2M", "-f", "2", "-n", "800", "-w", "1", "-c", "1", "--output", str(out)],
                  env=ray_head.env())
    # SIGKILL, to the driver this test started, once the 1M row is printed (as the size ends)
    assert run.signal_when("all_reduce", signal.SIGKILL, pause_s=0.3) == -signal.SIGKILL
    run_id, files = _groups_on_disk(out)
    assert files == ["r0-g0.parquet"]
    df = pd.read_parquet(out)
    kept, cut = df[df.status == "ok"], df[df.status != "ok"]
    assert sorted(zip(kept.collective, kept.msg_bytes)) == [("all_reduce", 1 << 20)] and (kept.n_wrong == 0).all()
    assert (cut.error == CUT_SHORT).all() and sorted(set(zip(cut.collective, cut.msg_bytes))) == \
        [("all_gather", 1 << 20), ("all_gather", 2 << 20), ("all_reduce", 2 << 20)]
    resumed = run_cli(["run", "--resume", run_id, "--output", str(out)], env=ray_head.env(), timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming: 0 group(s) already on disk are skipped" in resumed.stdout  # the cut group: measured whole
    df = pd.read_parquet(out)
    assert set(df.collective) == {"all_gather", "all_reduce"} and (df.status == "ok").all()
    assert len(df) == len(kept) + len(cut) and set(df.run_id) == {run_id}  # each size once


def test_sigusr1_ends_a_qualification_after_its_round_with_the_verdicts_so_far(four, tmp_path):
    """SIGUSR1, what `#SBATCH --signal=B:USR1@120` sends ahead of a time limit (qualify.sbatch passes it
    to the driver as sweep.sbatch does: tests/lab/test_slurm.py), once round 1 is said, on the shared
    four healthy nodes: the qualification ends after the round in flight; no node is named, so none is
    passed either: each is said unsettled, exit 138, the manifest `interrupted`."""
    out = tmp_path / "results"
    run = LiveRun(["qualify", "--address", four.address, "--ranks-per-node", "1", "--collective", "all_reduce", "-b",
                   "4M", "-e", "4M", "--run-id", "qualify-usr1", "--output", str(out)], env=four.env())
    assert run.signal_when("collbench: round 1 (", signal.SIGUSR1) == 138, "".join(run.stderr)[-3000:]
    said = "".join(run.stdout + run.stderr)  # rounds on stdout, what was cut short on stderr
    rounds = [line for line in said.splitlines() if line.startswith("collbench: round ")]
    assert 1 <= len(rounds) < 4, rounds  # 4 nodes: 3 rounds of pairs and a gate, had it gone on
    unsettled = [line for line in said.splitlines() if "node(s) named so far; not settled: " in line]
    assert len(unsettled) == 1 and unsettled[0].startswith("collbench: 0 node(s) named so far; not settled: ") and \
        len(unsettled[0].split("not settled: ")[1].split(";")[0].split(", ")) == 4, said[-3000:]
    assert f"stopped after {len(rounds)} rounds (SIGUSR1, ahead of a time limit)" in said, said[-3000:]
    record = dataset.manifest(str(out), "qualify-usr1")
    assert (record["state"], record["groups_total"]) == ("interrupted", record["groups_done"]), record
