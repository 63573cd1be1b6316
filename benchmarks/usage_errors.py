"""How long a usage error takes to be refused (issue 59: "answers in a second"): each mistake run
`--repeats` times as a new process, `collbench` as a user types it (python -m orchestrator), and
checked: exit 2, one line on stderr, `collbench: error: ...`, and (once more per mistake, under
PYTHONPROFILEIMPORTTIME) neither Ray nor torch imported. Prints the median
and worst per mistake and over all of them, as JSON; `--record` appends that to
benchmarks/data/usage_errors.jsonl with the date and commit.

    python benchmarks/usage_errors.py [--repeats 10] [--record]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(HERE, "benchmarks", "data", "usage_errors.jsonl")
MISTAKES = {
    "unknown option": ["run", "--itres", "5"],
    "bad value": ["run", "-n", "-1"],
    "bad size": ["run", "-e", "16Q"],
    "bad file": ["report", "/nonexistent/results"],
    "bad expected file": ["qualify", "--expected", "/nonexistent.yaml"],
}


def one(args: list[str], cwd: str, **env: str) -> tuple[float, int, str]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": HERE, **env})
    return time.monotonic() - t0, proc.returncode, proc.stderr


def heavy_imports(args: list[str], cwd: str) -> list[str]:
    """The top-level packages of Ray and torch the refused command imported (none is the aim)."""
    _, _, log = one(args, cwd, PYTHONPROFILEIMPORTTIME="1")
    names = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in log.splitlines()
             if line.startswith("import time:")}
    return sorted(names & {"ray", "torch"})


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--record", action="store_true", help=f"append the figures to {os.path.relpath(DATA, HERE)}")
    args = p.parse_args()
    out, every = {}, []
    with tempfile.TemporaryDirectory() as cwd:
        for name, argv in MISTAKES.items():
            times = []
            for _ in range(args.repeats):
                wall, code, stderr = one(argv, cwd)
                lines = stderr.strip().splitlines()
                if code != 2 or len(lines) != 1 or not lines[0].startswith("collbench: error:"):
                    print(f"{name}: exit {code}, stderr {stderr[-500:]!r}", file=sys.stderr)
                    return 1
                times.append(wall)
            last = lines[0]
            if heavy := heavy_imports(argv, cwd):
                print(f"{name}: imported {', '.join(heavy)} before refusing it", file=sys.stderr)
                return 1
            every += times
            out[name] = {"median_s": round(statistics.median(times), 3), "worst_s": round(max(times), 3),
                         "said": last}
    out["all"] = {"median_s": round(statistics.median(every), 3), "worst_s": round(max(every), 3),
                  "runs": len(every)}
    print(json.dumps(out, indent=1))
    if args.record:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                                text=True).stdout.strip()
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        with open(DATA, "a") as f:
            f.write(json.dumps({"date": stamp, "commit": commit, "cores": os.cpu_count(), "repeats": args.repeats,
                                **out}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
