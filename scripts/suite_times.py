#!/usr/bin/env python3
"""The test suite's times as data.

Each command has a budget on this 2-core machine (`BUDGET_S`): the unit tier 2 minutes, plain
`python -m pytest -q` (unit, integration, tests/gpu's CPU form, spread over the cores) 5 minutes, the
lab tier 20 minutes, `.ci/run` (every tier from a clean clone, install included) 30 minutes; and each
test a budget of its tier's (`PER_TEST_S`). Figures are pytest's own JUnit XML and the commands' wall
times, read back, never typed:

    python scripts/suite_times.py guard --junit X.xml [--junit Y.xml] [--wall LABEL=S ...] [--out JSON]
        the 25 slowest tests, each command's wall time against its budget, and every test over its
        tier's budget, named; exit 1 where a test is over its budget, or a command over its budget by
        more than TOLERANCE (.ci/run runs it on its own XML files and times)
    python scripts/suite_times.py measure [--tiers unit,plain,lab]
        run those commands here, one after another; append what each took to
        benchmarks/data/suite_times.jsonl (the history) and rewrite the generated sentences
    python scripts/suite_times.py record JSON
        append a summary written by `guard --out` (.ci/run's, from a clean clone) to the history
    python scripts/suite_times.py write     # README.md's and the docs' sentences about the suite
    python scripts/suite_times.py --check   # exit 1 naming each file whose sentences are stale

The sentences say the latest measurement of each command and the commit it was made at; a test
added since does not make them stale, a new measurement does.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HISTORY = ROOT / "benchmarks" / "data" / "suite_times.jsonl"
TIERS = ("unit", "integration", "gpu", "lab")
PLAIN = ("unit", "integration", "gpu")  # what `python -m pytest -q` runs
BUDGET_S = {"unit": 120, "plain": 300, "lab": 1200, "ci": 1800}  # each command's wall time
PER_TEST_S = {"unit": 15, "integration": 45, "gpu": 45, "lab": 300}  # a test's own time (set-up and teardown in)
TOLERANCE = 1.25  # a command over its budget by more than this fails the guard: two clean-clone CI runs an
# hour apart (1,195 and 1,205 tests, every integration test the same) timed the plain run at 294 and 344 s, 17%
COMMANDS = {  # what `measure` runs for each label, and what the sentences call it
    "unit": ["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit"],
    "plain": ["-m", "pytest", "-q", "-p", "no:cacheprovider"],
    "lab": ["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/lab"],
}
MARK_BEGIN = "<!-- generated: scripts/suite_times.py writes between these markers -->"
MARK_END = "<!-- end generated -->"
PAGES = (ROOT / "README.md", ROOT / "docs" / "start.md", ROOT / "docs" / "PERFORMANCE.md")


@dataclasses.dataclass(frozen=True)
class Case:
    nodeid: str
    tier: str
    seconds: float
    outcome: str  # passed, failed, skipped


def tier_of(classname: str) -> str:
    """tests.unit.test_x -> unit; a test outside the four folders counts as unit."""
    parts = classname.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "tests" and parts[1] in TIERS else "unit"


def read_junit(path: str | Path) -> list[Case]:
    """Every test case of a pytest JUnit XML file (setup, call and teardown in its time)."""
    root = ET.parse(path).getroot()
    cases = []
    for case in root.iter("testcase"):
        classname = case.get("classname", "")
        outcome = "failed" if case.find("failure") is not None or case.find("error") is not None else \
            "skipped" if case.find("skipped") is not None else "passed"
        nodeid = classname.replace(".", "/") + ".py::" + case.get("name", "")
        cases.append(Case(nodeid, tier_of(classname), float(case.get("time") or 0.0), outcome))
    return cases


def tiers(cases: list[Case]) -> dict[str, dict]:
    out = {}
    for tier in TIERS:
        mine = [c for c in cases if c.tier == tier]
        if mine:
            out[tier] = {"tests": len(mine), "skipped": sum(c.outcome == "skipped" for c in mine),
                         "failed": sum(c.outcome == "failed" for c in mine),
                         "seconds": round(sum(c.seconds for c in mine), 1)}
    return out


def over_budget(cases: list[Case]) -> list[Case]:
    """The tests over their tier's budget, slowest first."""
    return sorted((c for c in cases if c.seconds > PER_TEST_S[c.tier]), key=lambda c: -c.seconds)


def passes(label: str, wall_s: float) -> bool:
    """A command's wall time as the guard judges it: within its budget by the tolerance of one run."""
    return wall_s <= BUDGET_S[label] * TOLERANCE


def judge(summary: dict, cases: list[Case]) -> tuple[list[str], bool]:
    """Lines saying each tier's tests, each command's wall time against its budget and each test over
    its own; whether all is within."""
    lines, ok = [], True
    for tier, t in summary["tiers"].items():
        lines.append(f"  {tier:<12} {t['tests']:>5} tests {t['seconds']:8.1f} s of test time")
    for label, wall_s in summary["walls"].items():
        budget = BUDGET_S.get(label)
        if budget is None:
            continue
        verdict = "within" if wall_s <= budget else "OVER"
        ok = ok and passes(label, wall_s)
        lines.append(f"  {label:<12} {wall_s:8.1f} s wall, {verdict} its budget of {budget:.0f} s")
    over = over_budget(cases)
    budgets = ", ".join(f"{k} {v} s" for k, v in PER_TEST_S.items())
    lines.append(f"  tests over their tier's budget ({budgets}): {len(over) or 'none'}")
    lines += [f"    {c.seconds:7.1f} s  {c.nodeid}" for c in over]
    return lines, ok and not over


def slowest(cases: list[Case], n: int = 25) -> list[str]:
    return [f"  {c.seconds:7.1f} s  {c.nodeid}" for c in sorted(cases, key=lambda c: -c.seconds)[:n]]


def summarise(cases: list[Case], label: str, walls: dict[str, float], install_s: float | None = None,
              command: str = "") -> dict:
    record = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "commit": _commit(),
              "cores": os.cpu_count(), "label": label, "command": command,
              "walls": {k: round(v, 1) for k, v in walls.items()}, "tiers": tiers(cases),
              "slowest": [[c.nodeid, round(c.seconds, 2)] for c in sorted(cases, key=lambda c: -c.seconds)[:25]]}
    if install_s is not None:
        record["install_s"] = round(install_s, 1)
    return record


def _commit() -> str:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=False)
    return done.stdout.strip() or "unknown"


def history() -> list[dict]:
    if not HISTORY.exists():
        return []
    return [json.loads(line) for line in HISTORY.read_text().splitlines() if line.strip()]


def append(record: dict) -> None:
    HISTORY.parent.mkdir(parents=True, exist_ok=True)
    with HISTORY.open("a") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")


def latest() -> dict[str, dict]:
    """For each command (unit, plain, lab, ci), the latest record that timed it: a `measure` of that
    command, or .ci/run's summary, which times plain, lab and the whole."""
    return {label: r for r in history() for label in r["walls"]}


# -- the sentences ---------------------------------------------------------------------------

def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} minutes"


def _tests(record: dict, names: tuple[str, ...] = TIERS) -> int:
    return sum(record["tiers"][t]["tests"] for t in names if t in record["tiers"])


def sentences(records: dict[str, dict]) -> str:
    """What README and the docs say about the suite's size and time, from the latest records: each
    command's tests and wall time, as measured on this machine."""
    said = []
    for label, what, tiers_counted in (
            ("plain", "`python -m pytest -q` (unit, integration, tests/gpu's CPU form)", PLAIN),
            ("unit", "`python -m pytest -q tests/unit`", ("unit",)),
            ("lab", "the lab tier", ("lab",)),
            ("ci", "`.ci/run` (every tier from a clean clone, install included)", TIERS)):
        r = records.get(label)
        if r is None:
            continue
        wall_s = r["walls"][label]
        said.append(f"{what}: {_tests(r, tiers_counted):,} tests in {_duration(wall_s)}")
    if not said:
        return "No measurement of the suite is recorded yet (`python scripts/suite_times.py measure`).\n"
    where = sorted({(r["date"][:10], r["commit"]) for r in records.values()})
    at = "; ".join(f"commit {c}, {d}" for d, c in where)
    budgets = ", ".join(f"{k} {v // 60} min" for k, v in BUDGET_S.items())
    return (f"Measured on this 2-core machine ({at}): " + "; ".join(said) + f". Budgets: {budgets} (the figures "
            "and their history: `benchmarks/data/suite_times.jsonl`, written by `python scripts/suite_times.py "
            "measure`, and by `.ci/run`'s summary).\n")


def render(page: str, body: str) -> str:
    begin, end = page.index(MARK_BEGIN), page.index(MARK_END)
    return page[:begin + len(MARK_BEGIN)] + "\n" + body + page[end:]


def stale_pages(body: str) -> list[Path]:
    return [p for p in PAGES if MARK_BEGIN in p.read_text() and render(p.read_text(), body) != p.read_text()]


def write_pages(body: str) -> None:
    for page in stale_pages(body):
        page.write_text(render(page.read_text(), body))


# -- commands ----------------------------------------------------------------------------------

def cmd_guard(args) -> int:
    cases = [c for path in args.junit for c in read_junit(path)]
    walls = dict(_wall(w) for w in args.wall)
    summary = summarise(cases, "ci" if "ci" in walls else "run", walls, args.install_s, "python -m pytest -q")
    lines, ok = judge(summary, cases)
    print("\n".join(["suite times (scripts/suite_times.py guard): the 25 slowest tests", *slowest(cases), *lines]))
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
        print(f"  every test's time: {', '.join(args.junit)}; this summary: {args.out}")
    return 0 if ok else 1


def _wall(text: str) -> tuple[str, float]:
    label, _, seconds = text.partition("=")
    return label, float(seconds)


def cmd_measure(args) -> int:
    labels = [x for x in args.tiers.split(",") if x]
    unknown = [x for x in labels if x not in COMMANDS]
    if unknown:
        print(f"suite_times: error: --tiers {','.join(unknown)}: not one of {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    status = 0
    for label in labels:
        junit = Path(f"/tmp/suite_times-{label}-{os.getpid()}.xml")
        env = {k: v for k, v in os.environ.items() if k != "COLLBENCH_REQUIRE_LAB"}
        if label == "lab":  # the lab tier must run, not skip
            env["COLLBENCH_REQUIRE_LAB"] = "1"
        started = time.monotonic()
        done = subprocess.run([sys.executable, *COMMANDS[label], f"--junitxml={junit}"], cwd=ROOT, env=env, check=False)
        wall_s = time.monotonic() - started
        cases = read_junit(junit)
        command = "python " + " ".join(w for w in COMMANDS[label] if w not in ("-p", "no:cacheprovider"))
        record = summarise(cases, label, {label: wall_s}, command=command)
        record["exit"] = done.returncode  # a time is a time: kept with the failures it ran with
        lines, _ = judge(record, cases)
        print("\n".join([f"{label}: {wall_s:.1f} s, exit {done.returncode}", *lines]))
        if done.returncode != 0:
            failed = [c.nodeid for c in cases if c.outcome == "failed"]
            print(f"suite_times: {label} failed (exit {done.returncode}; {len(failed)} failed: "
                  f"{', '.join(failed[:5])}); recorded with its exit", file=sys.stderr)
            status = 1
        append(record)
    write_pages(sentences(latest()))
    return status


def cmd_record(args) -> int:
    record = json.loads(Path(args.summary).read_text())
    record["label"] = "ci"
    append(record)
    write_pages(sentences(latest()))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 naming each page whose sentences are stale")
    sub = parser.add_subparsers(dest="command")
    guard = sub.add_parser("guard", help="commands and tests against their budgets, from JUnit XML files")
    guard.add_argument("--junit", action="append", required=True, help="a pytest --junitxml file (repeatable)")
    guard.add_argument("--wall", action="append", default=[], metavar="LABEL=SECONDS",
                       help="a command's wall time: plain, unit, lab or ci (repeatable)")
    guard.add_argument("--install-s", type=float, help="the install's seconds (.ci/run's)")
    guard.add_argument("--out", help="write the summary here as JSON (for `record`)")
    measure = sub.add_parser("measure", help="run tiers here and append their times to the history")
    measure.add_argument("--tiers", default="unit,plain,lab", help="comma-separated: unit, plain, lab")
    record = sub.add_parser("record", help="append a summary written by `guard --out` to the history")
    record.add_argument("summary")
    sub.add_parser("write", help="rewrite the generated sentences from the history")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_pages(sentences(latest()))
        for page in stale:
            print(f"{page.relative_to(ROOT)}: stale (python scripts/suite_times.py write)")
        return 1 if stale else 0
    if args.command == "guard":
        return cmd_guard(args)
    if args.command == "measure":
        return cmd_measure(args)
    if args.command == "record":
        return cmd_record(args)
    if args.command == "write":
        write_pages(sentences(latest()))
        return 0
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
