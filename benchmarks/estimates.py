"""The estimate a run prints before it starts against the wall time it then takes, on this host:
quiet, and with one core held by a busy loop (a process of this benchmark's own, stopped after).

Each repeat, in a fresh output folder on an embedded Ray instance: the default sweep once to learn
the host's rates (its estimate from the stated defaults), again quiet (learned), and again with one
core busy (learned, corrected for the host's load now: orchestrator.sweep.estimate.busy_factor).
Prints each case's estimate, wall time and ratio, the median ratio and the worst, and appends one
JSON line per case to benchmarks/data/estimates.jsonl with --record.

    python benchmarks/estimates.py [--repeats 3] [--record]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(HERE, "benchmarks", "data", "estimates.jsonl")
SPIN = "import time\nwhile True:\n    pass\n"


def one_run(output: str) -> dict:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "run", "--output", output], cwd=HERE,
                          capture_output=True, text=True, timeout=900)
    wall_s = time.monotonic() - started
    text = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise SystemExit(f"exit {proc.returncode}\n{text[-3000:]}")
    said = re.search(r"estimate: about (?:(\d+) min )?(\d+) s \((.*)\)$", text, re.M)
    estimate_s = int(said.group(1) or 0) * 60 + int(said.group(2))
    return {"estimate_s": estimate_s, "wall_s": round(wall_s, 1), "ratio": round(wall_s / estimate_s, 2),
            "basis": said.group(3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3, help="repeats of the three cases (default 3)")
    ap.add_argument("--record", action="store_true", help=f"append the cases to {os.path.relpath(DATA, HERE)}")
    args = ap.parse_args()
    cases = []
    for _ in range(args.repeats):
        output = tempfile.mkdtemp(prefix="cbest")
        cases.append({"case": "defaults", **one_run(output)})
        cases.append({"case": "learned, quiet", **one_run(output)})
        spinner = subprocess.Popen([sys.executable, "-c", SPIN])
        try:
            time.sleep(2)
            cases.append({"case": "learned, one core busy", **one_run(output)})
        finally:
            spinner.kill()
            spinner.wait()
        time.sleep(5)
    print("| case | estimate s | wall s | wall / estimate |\n|---|---:|---:|---:|")
    for c in cases:
        print(f"| {c['case']} | {c['estimate_s']} | {c['wall_s']} | {c['ratio']} |")
    for name in ("learned, quiet", "learned, one core busy"):
        ratios = [c["ratio"] for c in cases if c["case"] == name]
        worst = max(ratios, key=lambda r: max(r, 1 / r))
        print(f"{name}: median wall/estimate {statistics.median(ratios):.2f}, worst {worst:.2f} ({len(ratios)} runs)")
    if args.record:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                                text=True).stdout.strip()
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        with open(DATA, "a") as f:
            for c in cases:
                f.write(json.dumps({"date": stamp, "commit": commit, "cores": os.cpu_count(), **c}) + "\n")


if __name__ == "__main__":
    main()
