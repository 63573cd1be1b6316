"""collbench under a real Slurm (issue 44): slurmctld and one slurmd per lab node (tests/lab/slurmlab.py,
Debian's slurm-wlm 22.05 and munge, installed by .ci/run), six nodes on two leaf bridges of three that
Slurm knows from a topology.conf (topology/tree), the shipped batch scripts of examples/slurm
submitted with `sbatch` with their site values substituted and nothing else changed (node count,
partition, no GPU line, the venv, the sweep's or qualify's options). Ray is started by the jobs
themselves (`ray symmetric-run`), as on a site. One Slurm lab serves every test; the sweeps run on
the nodes of one leaf (`sbatch --nodelist`). Checked:
- the sweep, stopped by SIGUSR1 to the batch shell (what `#SBATCH --signal=B:USR1@120` sends ahead of
  the time limit; here `scancel --signal=USR1 --batch`): the script passes it to the driver alone, the
  run ends after its round in flight with nothing cut short, exit 138, the manifest `interrupted` and
  recording the job; the script's resume (`sbatch sweep.sbatch RUN_ID`, a new job and a new Ray
  cluster) finishes it with every case once, rows from every node named by their Slurm names (slmI)
  beside host names that differ (h-slmI), every check exact;
- `scancel` mid-sweep: the job's finished groups are saved, the manifest says `interrupted` when the
  job has ended (srun kills its step within milliseconds of scancel: the driver marks it where it has
  the time, else the script's report does, finding the run's lock free), and the job's log says how to
  finish the run (the resume itself: the case above);
- the driver SIGKILLed (no time at all), in a sweep given `--exclude slm1` (a Slurm name; its host is
  h-slm1, found through NodeHostName): the script's report marks the manifest `interrupted`, naming
  the killed driver, and no row names slm1;
- qualify.sbatch (`--drain`) on one leaf with slm2's link at a quarter: exit 1, slm2 named by its
  Slurm name and drained with collbench's reason (`sinfo`), no other node touched; on all six with
  the path between the leaves at a quarter and no `--topology` (it reads `scontrol show topology` in
  the job by itself): exit 1, `slow_uplink leaf0,leaf1`, every node passing, none drained;
SIGUSR1 to a qualification: qualify.sbatch passes it on as sweep.sbatch does (the same lines), and
the qualification ends after its round in flight (tests/lab/test_faults.py).
A node whose Ray never joins the job: refused naming it by its Slurm name
(tests/integration/test_bad_input.py, with the job's Slurm variables)."""

from __future__ import annotations

import json
import os
import signal
import time

import pandas as pd
import pytest

from orchestrator.lab import cluster as labmod
from orchestrator.results import dataset
from orchestrator.results.store import CUT_SHORT
from tests.helpers import run_cli
from tests.lab.slurmlab import ROOT, VENV, lab_slurm, site_script

pytestmark = pytest.mark.lab
NODES = 6
LEAF = "slm[0-2]"  # the sweeps' nodes: one leaf
JOB_TIMEOUT_S = 420
# 5 groups of 6 cases (3 sizes, all_gather in place and not) at 5 timed iterations: a group of a few
# seconds on the lab's 400 Mbit/s links, long enough that a signal after the first lands mid-run
SWEEP = "--patterns inter,pairwise --ranks-per-node 1 -b 1M -e 4M -n 5 -w 1 --collectives all_reduce,all_gather"


@pytest.fixture(scope="module")
def slurm(labs):
    with lab_slurm(labs, NODES, leaves=2) as lab:
        yield lab


def _sweep(slurm, tmp_path, sweep: str, *args: str, nodes: int = 3, nodelist: str = LEAF) -> tuple[int, str]:
    script = site_script(os.path.join(ROOT, "examples", "slurm", "sweep.sbatch"), str(tmp_path), nodes, VENV, "SWEEP",
                         sweep)
    return slurm.sbatch(script, str(tmp_path), *args, nodelist=nodelist), script


def _rows(tmp_path, run_id: str) -> pd.DataFrame:
    return pd.read_parquet(tmp_path / "results" / run_id)


def _manifest(tmp_path, run_id: str) -> dict:
    return dataset.manifest(str(tmp_path / "results"), run_id)


def test_slurm_knows_the_leaves(slurm):
    """What Slurm 22.05 says (tests/unit/test_qualify_switches.py reads the same text): the spine lists
    every node below it beside its switches."""
    said = slurm.scontrol("show", "topology")
    assert said == ("SwitchName=leaf0 Level=0 LinkSpeed=1 Nodes=slm0,slm1,slm2\n"
                    "SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=slm3,slm4,slm5\n"
                    "SwitchName=spine Level=1 LinkSpeed=1 Nodes=slm[0-5] Switches=leaf[0-1]\n"), said


def test_sigusr1_ends_the_sweep_after_its_round_and_the_scripts_resume_measures_every_node_named_by_slurm(
        slurm, tmp_path):
    job, script = _sweep(slurm, tmp_path, SWEEP)
    out_path = tmp_path / f"collbench-sweep-{job}.out"
    _wait_for_progress(out_path, JOB_TIMEOUT_S)
    slurm.scancel(job, "--signal=USR1", "--batch")  # what --signal=B:USR1@120 sends at the time limit
    fields = slurm.wait_job(job, JOB_TIMEOUT_S)
    out = out_path.read_text()
    assert (fields["JobState"], fields["ExitCode"]) == ("FAILED", "138:0"), out[-3000:]
    assert "nice 15" not in out  # the script starts Ray with its workers at nice 0
    run_id = f"slurm-{job}"
    kept, record = _rows(tmp_path, run_id), _manifest(tmp_path, run_id)
    assert set(kept.status) == {"ok"} and 1 <= kept.group_id.nunique() < 5, kept.group_id.unique()  # none cut short
    assert (record["state"], record["groups_done"]) == ("interrupted", kept.group_id.nunique()), record
    job_record = json.loads(record["scheduler"])
    assert (job_record["job_id"], job_record["partition"], job_record["nodelist"]) == (str(job), "lab", LEAF)

    again = slurm.sbatch(script, str(tmp_path), run_id, nodelist=LEAF)  # a new job, a new Ray cluster
    fields = slurm.wait_job(again, JOB_TIMEOUT_S)
    out = (tmp_path / f"collbench-sweep-{again}.out").read_text()
    assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), out[-3000:]
    assert f"resuming: {kept.group_id.nunique()} group(s) already on disk are skipped" in out, out[-3000:]
    rows = _rows(tmp_path, run_id)
    assert set(rows.status) == {"ok"} and rows.n_wrong.sum() == 0 and rows.group_id.nunique() == 5
    key = rows.apply(lambda r: (r.group_id, r.collective, bool(r.in_place), int(r.msg_bytes)), axis=1)
    assert key.is_unique, key[key.duplicated()].tolist()
    # every case once: 5 groups (inter: 2 nodes, 3 nodes; three pairs) x (all_reduce in place, all_gather
    # in and out of place) x 2 sizes (1M, 4M)
    assert len(rows) == 5 * 3 * 2, sorted(key)
    assert _manifest(tmp_path, run_id)["state"] == "finished"
    # the nodes by Slurm's names (slmI), beside their host names (h-slmI): the names came from Slurm
    assert sorted({n for names in rows.scheduler_nodes for n in names}) == ["slm0", "slm1", "slm2"]
    assert sorted({h for hosts in rows.hosts for h in hosts}) == ["h-slm0", "h-slm1", "h-slm2"]
    pairs = sorted({tuple(sorted(n)) for n, p in zip(rows.scheduler_nodes, rows.pattern) if p == "pairwise"})
    assert pairs == [("slm0", "slm1"), ("slm0", "slm2"), ("slm1", "slm2")]


def test_scancel_mid_sweep_keeps_what_finished_and_says_how_to_finish_the_run(slurm, tmp_path):
    job, _ = _sweep(slurm, tmp_path, SWEEP)
    out_path = tmp_path / f"collbench-sweep-{job}.out"
    _wait_for_progress(out_path, JOB_TIMEOUT_S)
    slurm.scancel(job)
    fields = slurm.wait_job(job, 120)
    assert fields["JobState"] == "CANCELLED", fields
    run_id = f"slurm-{job}"
    # scancel signals every process of the job at once, and srun, signalled too, kills its step
    # (`srun: forcing job termination`: SIGKILL) within milliseconds: a driver killed within 10 ms of
    # its SIGTERM cannot mark its manifest; the batch script's report then does (the run's lock is
    # free), before the job ends. What it finished is on disk, and a resume measures the rest
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


def test_a_driver_killed_outright_has_its_manifest_marked_by_the_scripts_report(slurm, tmp_path):
    """The driver SIGKILLed mid-sweep (as the OOM killer does, or srun after scancel, which leaves it
    milliseconds): the step ends without it marking anything; the batch shell finds the manifest still
    `running` and the script's report marks it `interrupted`, naming the killed driver (a process of
    this node, gone) and the groups on disk; the job's log says how to finish the run. The sweep runs on
    four nodes less `--exclude slm1`, which takes the Slurm name (its host is h-slm1)."""
    job, _ = _sweep(slurm, tmp_path, f"{SWEEP} --exclude slm1", nodes=4, nodelist="slm[0-3]")
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
    assert not {n for names in kept.scheduler_nodes for n in names} - {"slm0", "slm2", "slm3"}, kept.scheduler_nodes


def _qualify(slurm, tmp_path, nodes: int, nodelist: str | None = None) -> tuple[int, str]:
    script = site_script(os.path.join(ROOT, "examples", "slurm", "qualify.sbatch"), str(tmp_path), nodes, VENV,
                         "QUALIFY", "--collective all_reduce -b 4M -e 8M -n 3 --ranks-per-node 1 --drain")
    job = slurm.sbatch(script, str(tmp_path), nodelist=nodelist)
    return job, tmp_path / f"collbench-qualify-{job}.out"


def test_the_qualify_script_drains_the_slow_node_and_no_other(slurm, tmp_path):
    labmod.shape_link(slurm.state, 2, "100mbit")
    try:
        job, out_path = _qualify(slurm, tmp_path, 3, LEAF)
        fields = slurm.wait_job(job, JOB_TIMEOUT_S)
        out = out_path.read_text()
        assert (fields["JobState"], fields["ExitCode"]) == ("FAILED", "1:0"), out[-3000:]
        assert "collbench: drained slm2 (slurm): scontrol update NodeName=slm2 State=DRAIN" in out, out[-3000:]
        states = slurm.states()
        assert states == {f"slm{i}": "drained" if i == 2 else "idle" for i in range(NODES)}, states
        assert slurm.reasons()["slm2"].startswith("collbench: slow"), slurm.reasons()
        # the run named by the job and its start, so that a requeued job's qualification is a new run
        assert _manifest(tmp_path, f"qualify-{job}-0")["state"] == "finished"  # SLURM_RESTART_COUNT unset
    finally:
        labmod.shape_link(slurm.state, 2, "400mbit")
        slurm.scontrol("update", "NodeName=slm2", "State=RESUME")


def test_the_qualify_script_reads_slurms_topology_names_the_slow_path_and_drains_nothing(slurm, tmp_path):
    """No `--topology`: qualify reads `scontrol show topology` in the job by itself; a switch is no
    node's to drain."""
    labmod.shape_uplink(slurm.state, 0, "300mbit")
    try:
        job, out_path = _qualify(slurm, tmp_path, NODES)
        fields = slurm.wait_job(job, JOB_TIMEOUT_S)
        out = out_path.read_text()
        assert (fields["JobState"], fields["ExitCode"]) == ("FAILED", "1:0"), out[-3000:]
        assert "collbench: switches from scontrol show topology: leaf0 3 node(s), leaf1 3 node(s)" in out, out[-3000:]
        assert "collbench: slow_uplink leaf0,leaf1: the path between leaf0 and leaf1: " in out, out[-3000:]
        assert "collbench: 6 of 6 node(s) pass" in out and "drained" not in out, out[-3000:]
        assert set(slurm.states().values()) == {"idle"}, slurm.states()
    finally:
        labmod.shape_uplink(slurm.state, 0, slurm.state.uplink_of(0))


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
