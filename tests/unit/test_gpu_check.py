"""scripts/gpu_check.py's steps on stand-in commands: each step's failure is a line of its own (a
report that crashes with exit 1 is not read as flags; a failed install stops the check), a step
that hangs is killed at its timeout, the budget cuts what is left, and nothing large or built is
committed to the tree that the GPU machine is sent."""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

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
    monkeypatch.setitem(gpu_check.TIMEOUTS_S, "sweep", 5)  # the least a step is given
    check = _check(tmp_path)
    began = time.monotonic()
    rc, _ = check.run("sweep", ["bash", "-c", "echo started; sleep 300 & wait"])
    assert rc is None and time.monotonic() - began < 20
    assert check.steps[-1].outcome == "failed" and check.steps[-1].note == "timed out after 5 s"
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


THIS_PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"


def _bundle_of_this_tree(bundle: Path, python: str = THIS_PYTHON, image: Path | None = None) -> Path:
    """A bundle as offline_bundle.sh leaves it: an archive (here not a real one) and its record of
    the sources it was built from, this tree's; returns the record's path."""
    bundle.mkdir(exist_ok=True)
    tag = python.replace(".", "")
    (bundle / f"collbench-offline-py{tag}.tar.xz").write_bytes(b"not an xz archive")
    record = bundle / f"collbench-offline-py{tag}.json"
    record.write_text(json.dumps(
        {"python": python, "commit": "0123456789abcdef", "built_utc": "2026-12-04T00:00:00Z",
         "image_sha256": hashlib.sha256(image.read_bytes()).hexdigest() if image else None,
         "sources": gpu_check.bundle_plan.source_record(REPO)}))
    return record


def test_a_failed_install_stops_the_check_with_its_line(tmp_path, capsys):
    bundle = tmp_path / "bundle"
    _bundle_of_this_tree(bundle)  # its archive does not unpack: install_bundle.sh exits 1 naming it
    code = gpu_check.main(["--bundle", str(bundle), "--rehearse", "--evidence", str(tmp_path / "ev")])
    out = capsys.readouterr().out
    assert code == 1
    assert "[gpu_check] step install: FAILED in " in out and ": exit 1" in out
    assert "install_bundle: could not unpack " in out and "collbench-offline-py" in out
    assert "[gpu_check] FAILED: install |" in out and "step ray" not in out
    assert "a second attempt" not in out  # a rehearsal: no device lease to spend


def test_nothing_large_or_built_is_committed():
    """The device tool carries the tree (64 MiB with the bundle): a 10 MiB wheel once sat at its root."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, text=True, check=True)
    names = [n for n in listed.stdout.split("\0") if n and (REPO / n).is_file()]
    assert [n for n in names if n.endswith((".whl", ".tar.xz", ".tar.gz"))] == []
    assert [n for n in names if (REPO / n).stat().st_size > 2_000_000] == []


def test_a_bundle_built_from_other_sources_is_refused_before_anything_runs(tmp_path, capsys):
    """The bundle is checked against the tree it is sent with: a change after it was built (or no
    record at all, or no archive for this Python) is refused with exit 2 in one line, before the install."""
    bundle = tmp_path / "bundle"
    path = _bundle_of_this_tree(bundle)
    record = json.loads(path.read_text())
    assert gpu_check.bundle_problem(bundle, THIS_PYTHON) is None
    record["sources"]["files"]["workloads/harness.py"] = "0" * 16  # built before harness.py last changed
    record["sources"]["files"]["workloads/gone.py"] = "1" * 16  # a module since removed
    record["sources"]["sha256"] = "stale"
    path.write_text(json.dumps(record))
    evidence = tmp_path / "ev"
    with pytest.raises(SystemExit) as stopped:
        gpu_check.main(["--bundle", str(bundle), "--rehearse", "--evidence", str(evidence)])
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"gpu_check.sh: error: --bundle '{bundle}' was built from other sources than this tree's "
                          "(commit 0123456789ab, 2026-12-04T00:00:00Z; changed workloads/harness.py; gone "
                          "workloads/gone.py): build it again")
    assert not evidence.exists()  # nothing started, nothing written
    path.unlink()
    assert "(no record of the sources it was built from)" in gpu_check.bundle_problem(bundle, THIS_PYTHON)
    # built for another Python: the GPU machine's 3.12 bundle run by this machine's interpreter
    assert gpu_check.bundle_problem(bundle, "3.9").startswith(
        f"--bundle '{bundle}' holds no collbench-offline-py39.tar.xz for Python 3.9 (it holds: collbench-offline-py")


def test_prepare_keeps_a_fresh_bundle_and_prints_the_call(tmp_path, monkeypatch, capsys):
    """--prepare: a bundle of this tree for the GPU machine's Python and image list is kept (nothing
    built) and the device tool's call printed; one for another image list is built again; a folder
    outside the tree, or holding other files, is refused before anything is removed."""
    image = REPO / gpu_check.BUNDLE_ARGS[3]
    bundle = REPO / ".bundle-test-prepare"
    built = []

    def fake_build(folder: Path) -> int:  # offline_bundle.sh, without the registry: what it leaves
        built.append(folder)
        _bundle_of_this_tree(folder, "3.12", image)
        return 0

    monkeypatch.setattr(gpu_check, "build_bundle", fake_build)
    try:
        _bundle_of_this_tree(bundle, "3.12", image)
        assert gpu_check.prepare(bundle, "6m") == 0 and built == []
        out = capsys.readouterr().out
        assert out.strip().endswith(
            'run(command="PATH=/opt/torch/.venv/bin:$PATH RAY_memory_monitor_refresh_ms=0 bash scripts/gpu_check.sh '
            '--bundle .bundle-test-prepare --evidence $OUT --budget 360s", carry=[".bundle-test-prepare"], '
            'timeout_s=420)')
        _bundle_of_this_tree(bundle, "3.12", REPO / "pyproject.toml")  # recorded for another image list
        assert gpu_check.prepare(bundle, "6m") == 0
        assert built == [bundle]
        assert "built for another list of the image's packages" in capsys.readouterr().out
        (bundle / "notes.txt").write_text("mine")
        _bundle_of_this_tree(bundle, "3.12", REPO / "pyproject.toml")
        assert gpu_check.prepare(bundle, "6m") == 2 and (bundle / "notes.txt").exists()
        assert "holds files other than a bundle's" in capsys.readouterr().err
    finally:
        shutil.rmtree(bundle, ignore_errors=True)
    outside = tmp_path / "bundle"
    _bundle_of_this_tree(outside, "3.12", REPO / "pyproject.toml")
    assert gpu_check.prepare(outside, "6m") == 2 and (outside / "collbench-offline-py312.tar.xz").exists()
    assert "is outside the tree" in capsys.readouterr().err


def _fake_bin(tmp_path: Path, name: str, script: str) -> str:
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text("#!/bin/sh\n" + script)
    (folder / name).chmod(0o755)
    return f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"


def test_nvidia_smi_that_hangs_or_fails_is_a_failed_step_with_its_reason(tmp_path, monkeypatch):
    """A cold driver's nvidia-smi: a timeout, never a traceback; its outputs kept as evidence."""
    monkeypatch.setitem(gpu_check.TIMEOUTS_S, "nvidia-smi", 5)
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
    rc, _ = check.run("doctor", [str(tmp_path / "no-such-program"), "doctor"])
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


def test_the_sweep_asks_for_every_collective_and_both_operators():
    """gpu_check.py once listed the collectives by hand (all_to_allv came and went); its sweep's
    options, read by collbench's own parser, give the registry's every collective and sum and max."""
    from orchestrator.commands.options import add_spec_options, spec_from_args
    from workloads.registry import COLLECTIVES

    for rehearse in (False, True):
        parser = argparse.ArgumentParser()
        add_spec_options(parser)
        spec = spec_from_args(parser.parse_args([*gpu_check.sweep_args(rehearse), "--output", "/tmp/x"]))
        assert spec.collectives == COLLECTIVES and spec.ops == ("sum", "max") and spec.dtypes == ("all",)
        assert spec.backend == ("gloo" if rehearse else "nccl") and spec.patterns == ("intra",)


def test_a_gpu_check_without_nvidia_smi_fails_that_step_and_says_how_to_try_again(tmp_path, capsys):
    check = gpu_check.Check(rehearse=False, budget_s=300, evidence=tmp_path, scratch=tmp_path)
    check.env["PATH"] = str(tmp_path / "empty")
    gpu_check.nvidia_smi(check)
    assert (check.steps[-1].outcome, check.steps[-1].note) == ("failed", "no nvidia-smi on PATH")
    assert gpu_check._close(check, REPO / ".bundle") == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("[gpu_check] a second attempt in the same lease (this one took ")
    assert last.endswith("B = the device tool's budget_left_s less 150 s for the machine's start and the "
                         'transfers, at most 540; run(command="PATH=/opt/torch/.venv/bin:$PATH '
                         "RAY_memory_monitor_refresh_ms=0 bash scripts/gpu_check.sh --bundle .bundle --evidence $OUT "
                         '--budget Bs", carry=[".bundle"], timeout_s=B + 60)')


def test_doctors_note_counts_warnings_as_warnings(tmp_path):
    """On the H200 VM doctor warned twice (no `ip` there to read interfaces); the note said
    "14 checks ok" then."""
    recorded = (REPO / "tests/fixtures/gpu/h200_20261204/doctor.json").read_text()
    assert gpu_check._doctor(_check(tmp_path), recorded) == (
        "ok", "14 checks: 12 ok, 2 warn, 0 fail; warned: interface, readable")
    assert json.loads((tmp_path / "doctor.json").read_text()) == json.loads(recorded)
    assert gpu_check._doctor(_check(tmp_path), "Traceback (most recent call last):") == (
        "failed", "no JSON from collbench doctor (a crash)")
