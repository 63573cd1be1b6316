"""scripts/gpu_check.py's steps on stand-in commands: each step's failure is a line of its own (a
report that crashes with exit 1 is not read as flags; a failed install stops the check), a step
that hangs is killed at its timeout, the budget cuts what is left, and nothing large or built is
committed to the tree that the GPU machine is sent."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import tarfile
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gpu_check", REPO / "scripts/gpu_check.py")
gpu_check = importlib.util.module_from_spec(_spec)
sys.modules["gpu_check"] = gpu_check  # dataclasses look their module up there
_spec.loader.exec_module(gpu_check)


def _check(tmp_path: Path, budget_s: float = 300) -> gpu_check.Check:
    return gpu_check.Check(rehearse=True, budget_s=budget_s, evidence=tmp_path, scratch=tmp_path)


def _report_of(tmp_path: Path, script: str) -> gpu_check.Step:
    check = _check(tmp_path)
    fake = tmp_path / "fake_report.py"
    fake.write_text(script)
    check.run("report", [sys.executable, str(fake)], ok_codes=(0, 1), closing=True,
              judge=lambda rc, out: gpu_check._json_in(out) and ("ok", "read") or ("failed", f"exit {rc}, no JSON"))
    return check.steps[-1]


def test_a_report_that_crashes_with_exit_1_fails_its_step(tmp_path, capsys):
    crashed = _report_of(tmp_path, "raise RuntimeError('boom')")  # Python's exit code 1, no JSON
    assert (crashed.outcome, crashed.note) == ("failed", "exit 1, no JSON")
    flagged = _report_of(tmp_path, "import json, sys\nprint(json.dumps({'flags': [1]}))\nsys.exit(1)")
    assert (flagged.outcome, flagged.note) == ("ok", "read")
    out = capsys.readouterr().out
    assert "[gpu_check] step report: FAILED in " in out and "RuntimeError: boom" in out  # the failure's tail shown


def test_the_real_report_judge_counts_flags_and_keeps_the_json(tmp_path, monkeypatch):
    check = _check(tmp_path)
    calls = []

    def fake_run(name, cmd, ok_codes=(0,), closing=False, judge=None, show_lines=2):
        calls.append(name)
        outcome, note = judge(1, 'collbench: note\n{"summary": {}, "flags": [{"kind": "slow"}, {"kind": "peer"}]}\n')
        check.steps.append(gpu_check.Step(name, outcome, 0.1, note))
        return 1, ""

    monkeypatch.setattr(check, "run", fake_run)
    gpu_check.report(check, tmp_path / "results")
    assert calls == ["report"] and check.steps[-1].outcome == "ok"
    assert check.steps[-1].note == "2 flag(s) (report.json)" and (tmp_path / "report.json").is_file()


def test_a_step_that_hangs_is_killed_at_its_timeout_and_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(gpu_check.TIMEOUTS_S, "sweep", 6)
    check = _check(tmp_path)
    began = time.monotonic()
    rc, _ = check.run("sweep", ["bash", "-c", "echo started; sleep 300 & wait"])
    assert rc is None and time.monotonic() - began < 20
    assert check.steps[-1].outcome == "failed" and check.steps[-1].note == "timed out after 6 s"
    assert "[gpu_check] step sweep: FAILED in " in capsys.readouterr().out
    leftover = subprocess.run(["pgrep", "-f", "sleep 300"], capture_output=True, text=True, check=False)
    assert leftover.stdout.strip() == ""  # its whole process session went


def test_the_budget_cuts_a_step_and_keeps_time_for_the_closing_steps(tmp_path):
    check = _check(tmp_path, budget_s=gpu_check.CLOSING_S + 2)
    rc, _ = check.run("sweep", [sys.executable, "-c", "print('never')"])
    assert rc is None and check.steps[-1].note.startswith("no time left in the ")
    rc, _ = check.run("verdict", [sys.executable, "-c", "print('closing')"], closing=True)
    assert rc == 0 and check.steps[-1].outcome == "ok"  # the verdict still runs
    assert gpu_check._close(check) == 1


def _record_of_this_tree(bundle: Path) -> None:
    """A bundle's record of the sources it was built from (offline_bundle.sh writes it), of this tree."""
    bundle.mkdir(exist_ok=True)
    (bundle / "collbench-offline-py312.json").write_text(json.dumps(
        {"python": "3.12", "commit": "0123456789abcdef", "built_utc": "2026-12-04T00:00:00Z",
         "sources": gpu_check.bundle_plan.source_record(REPO)}))


def test_a_failed_install_stops_the_check_with_its_line(tmp_path, capsys):
    bundle = tmp_path / "bundle"
    _record_of_this_tree(bundle)  # holds no archive for this Python: install_bundle.sh exits 2 naming it
    code = gpu_check.main(["--bundle", str(bundle), "--rehearse", "--evidence", str(tmp_path / "ev")])
    out = capsys.readouterr().out
    assert code == 1
    assert "[gpu_check] step install: FAILED in " in out and ": exit 2" in out
    assert "install_bundle: error: no " in out and "collbench-offline-py" in out
    assert "[gpu_check] FAILED: install |" in out and "step ray" not in out


def test_nothing_large_or_built_is_committed():
    """The device tool carries the tree (64 MiB with the bundle): a 10 MiB wheel once sat at its root."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, text=True, check=True)
    names = [n for n in listed.stdout.split("\0") if n and (REPO / n).is_file()]
    assert [n for n in names if n.endswith((".whl", ".tar.xz", ".tar.gz"))] == []
    assert [n for n in names if (REPO / n).stat().st_size > 2_000_000] == []


def test_a_bundle_built_from_other_sources_is_refused_before_anything_runs(tmp_path, capsys):
    """The bundle is checked against the tree it is sent with: a change after it was built (or no
    record at all) is refused with exit 2 in one line, before the install."""
    bundle = tmp_path / "bundle"
    _record_of_this_tree(bundle)
    record = json.loads((bundle / "collbench-offline-py312.json").read_text())
    assert gpu_check.bundle_problem(bundle) is None
    record["sources"]["files"]["workloads/harness.py"] = "0" * 16  # built before harness.py last changed
    record["sources"]["files"]["workloads/gone.py"] = "1" * 16  # a module since removed
    record["sources"]["sha256"] = "stale"
    (bundle / "collbench-offline-py312.json").write_text(json.dumps(record))
    evidence = tmp_path / "ev"
    try:
        gpu_check.main(["--bundle", str(bundle), "--rehearse", "--evidence", str(evidence)])
    except SystemExit as e:
        assert e.code == 2
    else:
        raise AssertionError("a stale bundle was not refused")
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"gpu_check.sh: error: --bundle '{bundle}' was built from other sources than this tree's "
                          "(commit 0123456789ab, 2026-12-04T00:00:00Z; changed workloads/harness.py; gone "
                          "workloads/gone.py): build it again")
    assert not evidence.exists()  # nothing started, nothing written
    (bundle / "collbench-offline-py312.json").unlink()
    assert "holds no collbench-offline-pyXY.json" in gpu_check.bundle_problem(bundle)


def _fake_bin(tmp_path: Path, name: str, script: str) -> str:
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text("#!/bin/sh\n" + script)
    (folder / name).chmod(0o755)
    return f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"


def test_nvidia_smi_that_hangs_or_fails_is_a_failed_step_with_its_reason(tmp_path, monkeypatch):
    """A cold driver's nvidia-smi: a timeout, never a traceback; its outputs kept as evidence."""
    monkeypatch.setitem(gpu_check.TIMEOUTS_S, "nvidia-smi", 6)
    check = _check(tmp_path)
    check.env["PATH"] = _fake_bin(tmp_path, "nvidia-smi", 'if [ "$1" = -q ]; then echo "GPU 0"; exit 0; fi\n'
                                                          'if [ "$1" = nvlink ]; then exit 3; fi\nsleep 60\n')
    began = time.monotonic()
    gpu_check.nvidia_smi(check)
    assert time.monotonic() - began < 20
    step = check.steps[-1]
    assert (step.name, step.outcome) == ("nvidia-smi", "failed")
    assert step.note.startswith("topo -m: timed out after ") and "nvlink --status: exit 3" in step.note
    assert (tmp_path / "nvidia-smi-q.txt").read_text() == "GPU 0\n"
    # topo and nvlink refused (some VMs do), -q read: the step passes with the refusals noted
    check = _check(tmp_path)
    check.env["PATH"] = _fake_bin(tmp_path, "nvidia-smi", 'if [ "$1" = -q ]; then echo "GPU 0"; exit 0; fi\nexit 3\n')
    gpu_check.nvidia_smi(check)
    assert check.steps[-1].outcome == "ok" and "topo -m: exit 3" in check.steps[-1].note
    # none on PATH: a failed step on a GPU check, not run in a rehearsal
    check = _check(tmp_path)
    check.env["PATH"] = str(tmp_path / "empty")
    gpu_check.nvidia_smi(check)
    assert (check.steps[-1].outcome, check.steps[-1].note) == ("not run", "no GPU (no nvidia-smi on PATH)")


def test_a_program_that_cannot_start_is_a_failed_step_not_a_traceback(tmp_path):
    check = _check(tmp_path)
    rc, output = check.run("doctor", [str(tmp_path / "no-such-program"), "doctor"])
    assert rc is None and check.steps[-1].outcome == "failed"
    assert check.steps[-1].note.startswith("could not start ") and "No such file or directory" in check.steps[-1].note


def test_the_evidence_archive_holds_rows_ray_log_tails_and_pip_list(tmp_path):
    check = _check(tmp_path / "ev")
    (tmp_path / "ev").mkdir()
    results = tmp_path / "results" / "sweep" / "run_id=r1"
    results.mkdir(parents=True)
    (results / "part-0.parquet").write_bytes(b"PAR1")
    (tmp_path / "ev" / "pip-list.txt").write_text("torch==2.11.0\n")
    logs = tmp_path / "ray" / "session_latest" / "logs"
    logs.mkdir(parents=True)
    (logs / "raylet.out").write_bytes(b"x" * (gpu_check.RAY_LOG_TAIL_BYTES + 10) + b"the end")
    gpu_check.archive_evidence(check, tmp_path / "results", tmp_path / "ray")
    with tarfile.open(tmp_path / "ev" / "results.tar.gz") as tar:
        names = set(tar.getnames())
        tail = tar.extractfile("ray-logs/raylet.out").read()
        pip_list = tar.extractfile("pip-list.txt").read()
    assert "results/sweep/run_id=r1/part-0.parquet" in names
    assert len(tail) == gpu_check.RAY_LOG_TAIL_BYTES and tail.endswith(b"the end")
    assert pip_list == b"torch==2.11.0\n"


def test_the_sweep_asks_for_every_collective_by_the_registrys_name_not_a_copy():
    """gpu_check.py once listed the collectives by hand; now it asks for `all`, which the spec turns
    into the registry's every collective."""
    source = (REPO / "scripts/gpu_check.py").read_text()
    assert '"--collectives", "all"' in source and "all_to_allv" not in source


def test_doctors_note_counts_warnings_as_warnings(tmp_path):
    """On the H200 VM doctor warned twice (no `ip` there to read interfaces); the note said
    "14 checks ok" then."""
    recorded = (REPO / "tests/fixtures/gpu/h200_20261204/doctor.json").read_text()
    assert gpu_check._doctor(_check(tmp_path), recorded) == (
        "ok", "14 checks: 12 ok, 2 warn, 0 fail; warned: interface, readable")
    assert json.loads((tmp_path / "doctor.json").read_text()) == json.loads(recorded)
    assert gpu_check._doctor(_check(tmp_path), "Traceback (most recent call last):") == (
        "failed", "no JSON from collbench doctor (a crash)")
