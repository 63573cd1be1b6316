"""collbench under a real Slurm (issue 44): slurmctld and one slurmd per lab node (tests/lab/slurmlab.py,
Debian's slurm-wlm 22.05 and munge, installed by .ci/run), the shipped batch scripts of examples/slurm
submitted with `sbatch` with their site values substituted and nothing else changed (node count,
partition, no GPU line, the venv, the sweep's or qualify's options). Ray is started by the jobs
themselves (`ray symmetric-run`), as on a site. Checked:
- the sweep: rows from every node, named by their Slurm names (slmI) beside host names that differ
  (h-slmI), every check exact, the manifest recording the job;
- `--exclude slm1` (a Slurm name; its host is h-slm1) leaves that node out;
- with one node's link slow, qualify.sbatch (`--drain`) exits 1, names that node by its Slurm name,
  and `sinfo` shows exactly that node drained with collbench's reason, no other touched;
- `scancel` mid-sweep: the job's finished groups are saved, and the
  script's resume (`sbatch sweep.sbatch RUN_ID`, a new job and a new Ray cluster) finishes it with
  every row once; the manifest says `interrupted` when the job has ended (srun kills its step within
  milliseconds of scancel: the driver marks it where it has the time, else the script's report does,
  finding the run's lock free), and the job's log says how to finish the run.
- a job whose third node's Ray cannot reach the head (its GCS port refused from that node): collbench
  waits for the job's nodes up to --group-timeout and refuses, exit 2, naming `slm2` as not joined;
- SIGUSR1 to the batch shell (what `#SBATCH --signal=B:USR1@120` sends ahead of the time limit;
  here `scancel --signal=USR1 --batch`): the script passes it to the driver alone, the run ends after
  its round in flight with nothing cut short, exit 138, the manifest `interrupted`; the resume
  finishes it; qualify.sbatch ends after its round in flight with the verdicts so far, nothing
  drained on a healthy lab;
- the driver SIGKILLed (no time at all): the script's report marks the manifest `interrupted`,
  naming the killed driver."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pandas as pd
import pytest

from orchestrator.lab import cluster as labmod
from orchestrator.results import dataset
from orchestrator.results.store import CUT_SHORT
from tests.helpers import run_cli
from tests.lab.slurmlab import ROOT, VENV, lab_slurm, site_script

pytestmark = pytest.mark.lab
NODES = 3
JOB_TIMEOUT_S = 420


@pytest.fixture(scope="module")
def slurm(labs):
    with lab_slurm(labs, NODES) as lab:
        yield lab


def _sweep(slurm, tmp_path, sweep: str, *args: str) -> tuple[int, str]:
    script = site_script(os.path.join(ROOT, "examples", "slurm", "sweep.sbatch"), str(tmp_path), NODES, VENV, "SWEEP",
                         sweep)
    return slurm.sbatch(script, str(tmp_path), *args), script


def _rows(tmp_path, run_id: str) -> pd.DataFrame:
    return pd.read_parquet(tmp_path / "results" / run_id)


def _manifest(tmp_path, run_id: str) -> dict:
    return dataset.manifest(str(tmp_path / "results"), run_id)


def test_the_sweep_script_measures_every_node_named_by_slurm(slurm, tmp_path):
    job, _ = _sweep(slurm, tmp_path, "--patterns inter,pairwise --ranks-per-node 1 -b 1M -e 1M --collectives all_reduce")
    fields = slurm.wait_job(job, JOB_TIMEOUT_S)
    out = (tmp_path / f"collbench-sweep-{job}.out").read_text()
    assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), out[-3000:]
    rows = _rows(tmp_path, f"slurm-{job}")
    assert set(rows.status) == {"ok"} and rows.n_wrong.sum() == 0
    assert sorted({n for names in rows.scheduler_nodes for n in names}) == ["slm0", "slm1", "slm2"]
    assert sorted({h for hosts in rows.hosts for h in hosts}) == ["h-slm0", "h-slm1", "h-slm2"]
    pairs = sorted(tuple(sorted(n)) for n, p in zip(rows.scheduler_nodes, rows.pattern) if p == "pairwise")
    assert pairs == [("slm0", "slm1"), ("slm0", "slm2"), ("slm1", "slm2")]
    job_record = json.loads(_manifest(tmp_path, f"slurm-{job}")["scheduler"])
    assert (job_record["job_id"], job_record["partition"], job_record["nodelist"]) == (str(job), "lab", "slm[0-2]")
    assert "nice 15" not in out  # the script starts Ray with its workers at nice 0


def test_exclude_takes_the_slurm_name(slurm, tmp_path):
    """`--exclude slm1` where the node's host is h-slm1: found through Slurm's NodeHostName."""
    job, _ = _sweep(slurm, tmp_path, "--patterns pairwise --exclude slm1 --ranks-per-node 1 -b 1M -e 1M "
                                     "--collectives all_reduce")
    fields = slurm.wait_job(job, JOB_TIMEOUT_S)
    out = (tmp_path / f"collbench-sweep-{job}.out").read_text()
    assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), out[-3000:]
    rows = _rows(tmp_path, f"slurm-{job}")
    assert [sorted(n) for n in rows.scheduler_nodes] == [["slm0", "slm2"]] and set(rows.status) == {"ok"}


def test_the_qualify_script_drains_the_slow_node_and_no_other(slurm, tmp_path):
    labmod.shape_link(slurm.state, 2, "100mbit")
    try:
        script = site_script(os.path.join(ROOT, "examples", "slurm", "qualify.sbatch"), str(tmp_path), NODES, VENV,
                             "QUALIFY", "--collective all_reduce -b 4M -e 4M --ranks-per-node 1 --drain")
        job = slurm.sbatch(script, str(tmp_path))
        fields = slurm.wait_job(job, JOB_TIMEOUT_S)
        out = (tmp_path / f"collbench-qualify-{job}.out").read_text()
        assert (fields["JobState"], fields["ExitCode"]) == ("FAILED", "1:0"), out[-3000:]
        assert "collbench: drained slm2 (slurm): scontrol update NodeName=slm2 State=DRAIN" in out, out[-3000:]
        states = slurm.states()
        assert states == {"slm0": "idle", "slm1": "idle", "slm2": "drained"}, states
        assert slurm.reasons()["slm2"].startswith("collbench: slow"), slurm.reasons()
    finally:
        labmod.shape_link(slurm.state, 2, "400mbit")
        slurm.scontrol("update", "NodeName=slm2", "State=RESUME")


def test_sigusr1_ends_the_qualify_script_after_its_round_with_the_verdicts_so_far(slurm, tmp_path):
    """Ahead of the time limit (`scancel --signal=USR1 --batch`, what --signal=B:USR1@120 sends) once
    the first round is said: qualify.sbatch passes it to the driver, which ends after the round in
    flight; no node is named on a healthy lab, so none is passed either: each is said unsettled, exit
    138, the manifest `interrupted`, nothing drained."""
    script = site_script(os.path.join(ROOT, "examples", "slurm", "qualify.sbatch"), str(tmp_path), NODES, VENV,
                         "QUALIFY", "--collective all_reduce -b 4M -e 4M --ranks-per-node 1 --drain")
    job = slurm.sbatch(script, str(tmp_path))
    out_path = tmp_path / f"collbench-qualify-{job}.out"
    _wait_for_progress(out_path, JOB_TIMEOUT_S, "collbench: round 1 (")
    slurm.scancel(job, "--signal=USR1", "--batch")
    fields = slurm.wait_job(job, JOB_TIMEOUT_S)
    out = out_path.read_text()
    assert (fields["JobState"], fields["ExitCode"]) == ("FAILED", "138:0"), out[-3000:]
    rounds = [line for line in out.splitlines() if line.startswith("collbench: round ")]
    assert 1 <= len(rounds) < 4, rounds  # 3 nodes: 3 rounds of pairs and a gate, had it gone on
    said = [line for line in out.splitlines() if "node(s) named so far; not settled: " in line]
    assert len(said) == 1 and said[0].startswith("collbench: 0 node(s) named so far; not settled: ") and \
        len(said[0].split("not settled: ")[1].split(";")[0].split(", ")) == NODES, out[-3000:]
    assert f"stopped after {len(rounds)} rounds (SIGUSR1, ahead of a time limit)" in out, out[-3000:]
    record = _manifest(tmp_path, f"qualify-{job}-0")  # the job's first start (SLURM_RESTART_COUNT unset)
    assert (record["state"], record["groups_total"]) == ("interrupted", record["groups_done"]), record
    assert slurm.states() == {f"slm{i}": "idle" for i in range(NODES)}


def test_scancel_mid_sweep_and_the_scripts_resume_finish_the_run_once(slurm, tmp_path):
    sweep = "--patterns inter,pairwise --ranks-per-node 1 -b 1M -e 4M --collectives all_reduce,all_gather"
    job, script = _sweep(slurm, tmp_path, sweep)
    out_path = tmp_path / f"collbench-sweep-{job}.out"
    _wait_for_progress(out_path, JOB_TIMEOUT_S)
    slurm.scancel(job)
    fields = slurm.wait_job(job, 120)
    assert fields["JobState"] == "CANCELLED", fields
    run_id = f"slurm-{job}"
    # scancel signals every process of the job at once, and srun, signalled too, kills its step
    # (`srun: forcing job termination`: SIGKILL) within milliseconds: a driver killed within 10 ms of
    # its SIGTERM cannot mark its manifest; the batch script's report then does (the run's lock is
    # free), before the job ends. What it finished is on disk, and the resume measures the rest
    kept = _rows(tmp_path, run_id)  # the groups finished before the signal, on disk
    assert "r0-g0" in set(kept.group_id) and (kept[kept.group_id == "r0-g0"].status == "ok").all()
    log = out_path.read_text()
    assert not any(word in log for word in ("ProcessGroupGloo", "RayActorError", "collbench: error", "Unhandled error",
                                            "Connection closed by peer")), log[-3000:]
    record = _manifest(tmp_path, run_id)
    whole = set(kept.group_id) - set(kept.group_id[kept.error == CUT_SHORT])  # a group in flight is measured again
    assert record["state"] == "interrupted" and record["groups_done"] == len(whole), (record, log[-3000:])
    assert f"collbench: to finish run {run_id} (unless Slurm requeues this job, which resumes it): sbatch " \
           f"sweep.sbatch {run_id}" in log, log[-3000:]
    assert f"run {run_id} (interrupted)" in log, log[-3000:]  # the script's report, in the job's log
    report = run_cli(["report", str(tmp_path / "results"), "--run", run_id, "--format", "json"], timeout=120)
    said = [w for w in json.loads(report.stdout)["warnings"] if w.startswith("the run was interrupted after")]
    assert len(said) == 1 and said[0].endswith(f"resume it with collbench run --resume {run_id}"), report.stdout[-3000:]
    again = slurm.sbatch(script, str(tmp_path), run_id)  # the script's resume: a new job, a new Ray cluster
    fields = slurm.wait_job(again, JOB_TIMEOUT_S)
    out = (tmp_path / f"collbench-sweep-{again}.out").read_text()
    assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), out[-3000:]
    rows = _rows(tmp_path, run_id)
    assert set(rows.status) == {"ok"} and rows.n_wrong.sum() == 0
    key = rows.apply(lambda r: (r.group_id, r.collective, bool(r.in_place), int(r.msg_bytes)), axis=1)
    assert key.is_unique, key[key.duplicated()].tolist()
    # every case once: 5 groups (inter: 2 nodes, 3 nodes; three pairs) x (all_reduce in place, all_gather
    # in and out of place) x 2 sizes (1M, 4M)
    assert len(rows) == 5 * 3 * 2, sorted(key)
    assert _manifest(tmp_path, run_id)["state"] == "finished"


def test_a_driver_killed_outright_has_its_manifest_marked_by_the_scripts_report(slurm, tmp_path):
    """The driver SIGKILLed mid-sweep (as the OOM killer does, or srun after scancel, which leaves it
    milliseconds): the step ends without it marking anything; the batch shell finds the manifest still
    `running` and the script's report marks it `interrupted`, naming the killed driver (a process of
    this node, gone) and the groups on disk; the job's log says how to finish the run."""
    sweep = "--patterns inter,pairwise --ranks-per-node 1 -b 1M -e 4M --collectives all_reduce,all_gather"
    job, _ = _sweep(slurm, tmp_path, sweep)
    out_path = tmp_path / f"collbench-sweep-{job}.out"
    _wait_for_progress(out_path, JOB_TIMEOUT_S)
    run_id = f"slurm-{job}"
    os.kill(_driver_pid(run_id), signal.SIGKILL)  # a process this test's job started, by its PID
    slurm.wait_job(job, JOB_TIMEOUT_S)
    log = out_path.read_text()
    assert "collbench: interrupted" not in log, log[-3000:]  # the driver said nothing: it had no time
    kept, record = _rows(tmp_path, run_id), _manifest(tmp_path, run_id)
    whole = set(kept.group_id) - set(kept.group_id[kept.error == CUT_SHORT])
    assert record["state"] == "interrupted" and record["groups_done"] == len(whole) >= 1, (record, log[-3000:])
    assert record["ended_by"].startswith("its driver was killed without marking its manifest, host h-slm0 pid ") \
        and " marked by collbench report at " in record["ended_by"], record["ended_by"]
    assert f"run {run_id} (interrupted)" in log and f"sbatch sweep.sbatch {run_id}" in log, log[-3000:]


def _driver_pid(run_id: str) -> int:
    """The PID, in this namespace, of the collbench driver of `run_id` (the `collbench run` process, not
    the `ray symmetric-run` that started it), found by its command line."""
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                words = [w.decode(errors="replace") for w in f.read().split(b"\0") if w]
        except OSError:
            continue
        if run_id in words and "symmetric-run" not in words and "run" in words[:3] and any(
                w.rsplit("/", 1)[-1] == "collbench" for w in words[:2]):
            return int(entry)
    raise AssertionError(f"no collbench driver of {run_id} runs")


def _wait_for_progress(path, timeout_s: float, said: str = "[progress] 1/") -> None:
    """Until the job's log says `said` (by default: its first group done)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and said not in (path.read_text() if path.exists() else ""):
        time.sleep(0.5)
    assert said in path.read_text(), path.read_text()[-3000:]


def test_sigusr1_to_the_batch_shell_ends_the_run_after_its_round_and_the_resume_finishes_it(slurm, tmp_path):
    sweep = "--patterns inter,pairwise --ranks-per-node 1 -b 1M -e 4M --collectives all_reduce,all_gather"
    job, script = _sweep(slurm, tmp_path, sweep)
    out_path = tmp_path / f"collbench-sweep-{job}.out"
    _wait_for_progress(out_path, JOB_TIMEOUT_S)
    slurm.scancel(job, "--signal=USR1", "--batch")  # what --signal=B:USR1@120 sends at the time limit
    fields = slurm.wait_job(job, JOB_TIMEOUT_S)
    out = out_path.read_text()
    assert (fields["JobState"], fields["ExitCode"]) == ("FAILED", "138:0"), out[-3000:]
    run_id = f"slurm-{job}"
    assert _manifest(tmp_path, run_id)["state"] == "interrupted"
    kept = _rows(tmp_path, run_id)
    assert set(kept.status) == {"ok"} and 1 <= kept.group_id.nunique() < 5, kept.group_id.unique()  # none cut short
    again = slurm.sbatch(script, str(tmp_path), run_id)
    fields = slurm.wait_job(again, JOB_TIMEOUT_S)
    assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0")
    rows = _rows(tmp_path, run_id)
    assert set(rows.status) == {"ok"} and len(rows) == 5 * 3 * 2 and rows.group_id.nunique() == 5
    assert _manifest(tmp_path, run_id)["state"] == "finished"


def test_a_node_whose_ray_never_joins_is_named_by_slurm_within_the_deadline(slurm, tmp_path):
    ns = slurm.state.namespaces[2]
    rule = ["OUTPUT", "-p", "tcp", "--dport", "6379", "-j", "REJECT"]  # the head's GCS, from slm2 only
    subprocess.run(["ip", "netns", "exec", ns, "iptables", "-A", *rule], check=True, timeout=30)
    try:
        started = time.monotonic()
        job, _ = _sweep(slurm, tmp_path, "--patterns inter --ranks-per-node 1 -b 1M -e 1M --collectives all_reduce "
                                         "--group-timeout 20")
        fields = slurm.wait_job(job, JOB_TIMEOUT_S)
        out = (tmp_path / f"collbench-sweep-{job}.out").read_text()
        assert (fields["JobState"], fields["ExitCode"]) == ("FAILED", "2:0"), out[-3000:]
        said = [line for line in out.splitlines() if line.startswith("collbench: error:")]
        assert len(said) == 1 and said[0].startswith(
            "collbench: error: 3 node(s) expected (the Slurm job's nodes, $SLURM_JOB_NUM_NODES), 2 joined in 20 s: ") \
            and "; not joined: slm2 (Slurm); " in said[0], said
        assert "collbench: waiting for 3 node(s) (the Slurm job's nodes, $SLURM_JOB_NUM_NODES), up to 20 s" in out
        assert not (tmp_path / "results" / f"slurm-{job}").exists()  # nothing measured: no smaller sweep
        assert time.monotonic() - started < 150
    finally:
        subprocess.run(["ip", "netns", "exec", ns, "iptables", "-D", *rule], check=True, timeout=30)
