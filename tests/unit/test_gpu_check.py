"""scripts/gpu_check.py's steps on stand-in commands: each step's failure is a line of its own (a
report that crashes with exit 1 is not read as flags; a failed install stops the check), a step
that hangs is killed at its timeout, the budget cuts what is left, and nothing large or built is
committed to the tree that the GPU machine is sent."""

from __future__ import annotations

import importlib.util
import subprocess
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


def test_a_failed_install_stops_the_check_with_its_line(tmp_path, capsys):
    bundle = tmp_path / "bundle"
    bundle.mkdir()  # holds no archive for this Python: install_bundle.sh exits 2 naming it
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
