"""The suite's times are data (scripts/suite_times.py): the recorded measurements meet their budgets,
README's and the docs' sentences about the suite are what the records say, and the guard that
.ci/run calls names a test over its tier's budget and fails on it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "suite_times.py"


def _module():
    spec = importlib.util.spec_from_file_location("suite_times", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_recorded_commands_meet_their_budgets():
    """As the guard judges them: a command within its budget by the tolerance of one run on this
    shared host (README says each figure beside its budget), every test within its tier's."""
    st = _module()
    latest = st.latest()
    assert {"unit", "plain", "lab", "ci"} <= set(latest), sorted(latest)  # each measured at least once
    for label, record in latest.items():
        wall_s = record["walls"][label]  # the latest timing of each command
        assert st.passes(label, wall_s), \
            f"{label}: {wall_s} s at commit {record['commit']} (budget {st.BUDGET_S[label]} s)"
        over = [(nodeid, s) for nodeid, s in record["slowest"]
                if s > st.PER_TEST_S[st.tier_of(nodeid.split(".py::")[0].replace("/", "."))]]
        assert not over, f"{label} at commit {record['commit']}: tests over their tier's budget: {over}"


def test_the_sentences_about_the_suite_are_generated_from_the_records():
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    said = _module().sentences(_module().latest())
    for page in ("README.md", "docs/start.md", "docs/PERFORMANCE.md"):
        assert said in (ROOT / page).read_text(), page


def _junit(path: Path, cases: list[tuple[str, str, float]]) -> str:
    body = "".join(f'<testcase classname="{c}" name="{n}" time="{t}"/>' for c, n, t in cases)
    path.write_text(f'<?xml version="1.0"?><testsuites><testsuite name="pytest" time="1">{body}</testsuite>'
                    "</testsuites>")
    return str(path)


def test_the_guard_names_a_test_over_its_tiers_budget_and_fails(tmp_path):
    st = _module()
    within = _junit(tmp_path / "a.xml", [("tests.unit.test_a", "test_quick", 0.5),
                                         ("tests.lab.test_b", "test_lab", st.PER_TEST_S["lab"] - 1)])
    done = subprocess.run([sys.executable, str(SCRIPT), "guard", "--junit", within, "--wall", "plain=100",
                           "--out", str(tmp_path / "s.json")], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tests over their tier's budget" in done.stdout and ": none" in done.stdout
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["tiers"]["unit"] == {"tests": 1, "skipped": 0, "failed": 0, "seconds": 0.5}
    assert summary["walls"] == {"plain": 100.0}

    slow = st.PER_TEST_S["unit"] + 1
    over = _junit(tmp_path / "b.xml", [("tests.unit.test_a", "test_grew", slow)])
    done = subprocess.run([sys.executable, str(SCRIPT), "guard", "--junit", over], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 1 and f"{slow:7.1f} s  tests/unit/test_a.py::test_grew" in done.stdout, done.stdout
    # a command over its budget by more than the tolerance fails too; within the tolerance it is said
    too_long = st.BUDGET_S["plain"] * st.TOLERANCE + 1
    done = subprocess.run([sys.executable, str(SCRIPT), "guard", "--junit", within, "--wall", f"plain={too_long}"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 1 and "OVER its budget of 300 s" in done.stdout, done.stdout
    done = subprocess.run([sys.executable, str(SCRIPT), "guard", "--junit", within, "--wall", "plain=310"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "OVER its budget of 300 s" in done.stdout, done.stdout
