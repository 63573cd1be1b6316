"""Real faults injected from outside (no hooks in the product): a hung rank (SIGSTOP), a dead rank
(SIGKILL), a killed driver followed by --resume, and Ctrl-C. Each test checks the rows on disk."""

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


def _signal_driver_after_first_group(env: dict, out, sig: int) -> LiveRun:
    """A 3-group run whose driver gets `sig` once the first group is on disk."""
    run = LiveRun([*THREE_GROUPS, "--output", str(out)], env=env)
    try:
        run.wait_for("[progress] 1/3 groups done", timeout=180)
        run.proc.send_signal(sig)
        run.returncode = run.finish(timeout=60)
    finally:
        run.kill()
    return run


def test_killed_driver_then_resume_measures_each_group_once(ray_head, tmp_path):
    out = tmp_path / "results"
    _signal_driver_after_first_group(ray_head.env(), out, signal.SIGKILL)
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
    run = _signal_driver_after_first_group(ray_head.env(), out, signal.SIGINT)
    assert run.returncode == 130
    run_id, files = _groups_on_disk(out)
    assert "r0-g0.parquet" in files
    # a run on a named cluster ($RAY_ADDRESS here) is resumed there
    assert _resume_command(run) == ["collbench", "run", "--resume", run_id, "--output", str(out),
                                    "--address", ray_head.address]
    manifest = dataset.manifest(str(out), run_id)
    assert manifest["state"] == "interrupted"
    assert (manifest["groups_total"], manifest["groups_done"]) == (3, len(files))  # counted as each group ended
    assert (pd.read_parquet(out).status == "ok").all()
    time.sleep(1)
    assert not worker_pids()  # actors released


def test_ctrl_c_in_a_group_keeps_its_finished_cases_and_resume_measures_it_whole(ray_head, tmp_path):
    """Issue 45: Ctrl-C during a one-group run said "finished groups are saved" and saved none. The
    group's first case (all_reduce) is done when the signal comes, its second (all_gather) is not:
    the all_reduce rows are kept, the all_gather ones are rows saying the interrupt cut them, the
    closing line counts that, the report reads the run, and --resume measures the group whole."""
    out = tmp_path / "results"
    run = LiveRun(["run", "--ranks-per-node", "2", "--patterns", "intra", "--collectives", "all_reduce,all_gather",
                   "-b", "1M", "-e", "1M", "-n", "3000", "-w", "1", "-c", "1", "--output", str(out)],
                  env=ray_head.env())
    try:
        run.wait_for("all_reduce", timeout=180)  # its row, printed as the case ends
        time.sleep(0.5)
        run.proc.send_signal(signal.SIGINT)
        run.returncode = run.finish(timeout=60)
    finally:
        run.kill()
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
    before = set(worker_pids())  # an earlier test's workers may still be ending
    proc = run_cli(["run", "--config", str(cfg), "--output", str(tmp_path / "out")], env=ray_head.env())
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert message in lines[-1] and lines[-1].startswith("collbench: error:")
    assert not (tmp_path / "out").exists() and not set(worker_pids()) - before  # refused before any actor


def _resume_command(run: LiveRun) -> list[str]:
    """The resume command the driver printed last on stderr, as words."""
    lines = [line.strip() for line in run.stderr if line.strip().startswith("collbench run --resume")]
    assert lines, "".join(run.stderr)[-2000:]
    return shlex.split(lines[-1])


def _embedded_env() -> dict:
    return {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}


def test_sigterm_of_an_embedded_run_exits_143_and_the_printed_command_resumes_it(tmp_path):
    """README's default mode: no cluster named, so each run starts its own Ray instance, with new
    node ids; the resumed run is the same run on the same one-node shape."""
    out = tmp_path / "results"
    run = _signal_driver_after_first_group(_embedded_env(), out, signal.SIGTERM)
    assert run.returncode == 143, "".join(run.stderr)[-2000:]
    run_id, files = _groups_on_disk(out)
    assert 1 <= len(files) < 3
    manifest = dataset.manifest(str(out), run_id)
    assert (manifest["state"], manifest["groups_done"]) == ("interrupted", len(files))
    command = _resume_command(run)
    assert command == ["collbench", "run", "--resume", run_id, "--output", str(out)]  # embedded: no --address

    resumed = run_cli(command[1:], env=_embedded_env(), timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"resuming: {len(files)} group(s) already on disk are skipped" in resumed.stdout
    df = pd.read_parquet(out)
    assert sorted(df.group_id) == ["r0-g0", "r1-g0", "r2-g0"] and (df.status == "ok").all()  # each group once
    assert set(df.run_id) == {run_id}
    manifest = dataset.manifest(str(out), run_id)
    assert (manifest["state"], manifest["groups_done"], manifest["groups_total"]) == ("finished", 3, 3)


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


def test_a_crashed_driver_loses_only_the_size_in_flight(ray_head, tmp_path):
    """Issue 45: a crash (the driver killed outright: no signal handler, nothing flushed) lost every
    size of the groups in flight. A size is one call on each rank (runner.one_size_each), and a group
    in flight writes its finished sizes as it goes (at most once a second, runner.CHECKPOINT_S):
    killed while all_reduce's 2M runs, its 1M row is on disk, the sizes not measured are rows saying
    the run was cut there, and --resume measures the group whole, each size once."""
    out = tmp_path / "results"
    run = LiveRun(["run", "--ranks-per-node", "2", "--patterns", "intra", "--collectives", "all_reduce,all_gather",
                   "-b", "1M", "-e", "2M", "-f", "2", "-n", "1500", "-w", "1", "-c", "1", "--output", str(out)],
                  env=ray_head.env())
    try:
        run.wait_for("all_reduce", timeout=180)  # the 1M row, printed as the size ends
        time.sleep(0.3)
        run.proc.kill()  # SIGKILL, to the driver this test started
        run.returncode = run.finish(timeout=60)
    finally:
        run.kill()
    assert run.returncode == -signal.SIGKILL
    run_id, files = _groups_on_disk(out)
    assert files == ["r0-g0.parquet"]
    df = pd.read_parquet(out)
    kept, cut = df[df.status == "ok"], df[df.status != "ok"]
    assert sorted(zip(kept.collective, kept.msg_bytes)) == [("all_reduce", 1 << 20)] and (kept.n_wrong == 0).all()
    assert (cut.error == CUT_SHORT).all() and sorted(set(zip(cut.collective, cut.msg_bytes))) == \
        [("all_gather", 1 << 20), ("all_gather", 2 << 20), ("all_reduce", 2 << 20)]
    resumed = run_cli(["run", "--resume", run_id, "--output", str(out)], env=ray_head.env(), timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    df = pd.read_parquet(out)
    assert set(df.collective) == {"all_gather", "all_reduce"} and (df.status == "ok").all()
    assert len(df) == len(kept) + len(cut)  # each size once


def test_sigusr1_ends_the_run_after_the_group_in_flight_and_resume_finishes_it(ray_head, tmp_path):
    """Issue 44: Slurm's `#SBATCH --signal=USR1@120`, ahead of a time limit. Sent once the first of
    three groups (one a round) is on disk: the group in flight finishes whole, the third never
    starts, no row says cut short, the manifest says interrupted, and the printed resume measures
    only what is missing."""
    out = tmp_path / "results"
    run = _signal_driver_after_first_group(ray_head.env(), out, signal.SIGUSR1)
    assert run.returncode == 138, "".join(run.stderr)[-2000:]
    run_id, files = _groups_on_disk(out)
    # the second group whole (the signal came while it ran), or none of it where the signal came
    # between the rounds; never the third, never a group cut short
    assert files in (["r0-g0.parquet", "r1-g0.parquet"], ["r0-g0.parquet"]), files
    df = pd.read_parquet(out)
    assert (df.status == "ok").all() and sorted(set(df.group_id)) == [f.split(".")[0] for f in files]
    manifest = dataset.manifest(str(out), run_id)
    assert (manifest["state"], manifest["groups_done"]) == ("interrupted", len(files))
    resumed = run_cli(_resume_command(run)[1:], env=ray_head.env(), timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"resuming: {len(files)} group(s) already on disk are skipped" in resumed.stdout
    df = pd.read_parquet(out)
    assert sorted(df.group_id) == ["r0-g0", "r1-g0", "r2-g0"] and (df.status == "ok").all()


def test_a_named_run_resumes_itself_and_is_not_measured_twice(ray_head, tmp_path):
    """Issue 44: a batch job requeued after a time limit runs the same command again; with
    --run-id slurm-$SLURM_JOB_ID the second start resumes the run (only the groups it lacks), and a
    third, after it finished, measures nothing and says so (exit 0)."""
    out = tmp_path / "results"
    named = [*THREE_GROUPS, "--output", str(out), "--run-id", "slurm-4242"]
    run = LiveRun(named, env=ray_head.env())
    try:
        run.wait_for("[progress] 1/3 groups done", timeout=180)
        run.proc.send_signal(signal.SIGTERM)  # what scancel and a time limit send
        run.returncode = run.finish(timeout=60)
    finally:
        run.kill()
    assert run.returncode == 143
    run_id, before = _groups_on_disk(out)
    assert run_id == "slurm-4242" and 1 <= len(before) < 3
    again = run_cli(named[:], env=ray_head.env(), timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"resuming: {len(before)} group(s) already on disk are skipped" in again.stdout
    df = pd.read_parquet(out)
    assert sorted(df.group_id) == ["r0-g0", "r1-g0", "r2-g0"] and (df.status == "ok").all()
    third = run_cli(named, env=ray_head.env(), timeout=300)
    assert third.returncode == 0 and third.stdout == (f"collbench: run slurm-4242 in {out} finished already: nothing "
                                                      "measured again (a new run needs another --run-id)\n"), third.stderr
    assert len(pd.read_parquet(out)) == 3
