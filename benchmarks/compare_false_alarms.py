"""How often `collbench compare` raises a false alarm on this machine, measured: default embedded
runs (`python -m orchestrator run --output DIR`, nothing changed between them) back to back while
another process this script starts keeps a core busy, each consecutive pair compared as a user
would (`python -m orchestrator compare DIR --baseline-run A --new-run B`). Every exit 1 is a false
alarm (the cluster did not change). Prints each compare (exit code, verdict, rows flagged, each
run's contention as the rows recorded it) and the totals; not a test (docs/PERFORMANCE.md section 7).

    python benchmarks/compare_false_alarms.py --runs 21 --output /tmp/fa [--load-cores 1]
    python benchmarks/compare_false_alarms.py --output /tmp/fa --compare-only [--tree OTHER_CHECKOUT]
        (compare the runs already in DIR, with this checkout's compare or another's: before and after)
    ... --record benchmarks/data/compare_false_alarms.jsonl   (append the totals as one JSON line)
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

RUN_TIMEOUT_S = 900  # one default run: ~20 s on a quiet host, minutes on a busy one
COMPARE_TIMEOUT_S = 300


def runs_back_to_back(output: str, n: int, load_cores: int) -> list[int]:
    """`n` default runs into `output` while `load_cores` busy loops (started here, ended by their
    PIDs) hold cores; each run's exit code."""
    loads = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(load_cores)]
    codes = []
    try:
        for i in range(n):
            t0 = time.monotonic()
            try:
                proc = subprocess.run([sys.executable, "-m", "orchestrator", "run", "--output", output], cwd=ROOT,
                                      capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
                codes.append(proc.returncode)
            except subprocess.TimeoutExpired:
                codes.append(124)
            print(f"run {i + 1}/{n}: exit {codes[-1]} in {time.monotonic() - t0:.0f} s", flush=True)
    finally:
        for p in loads:
            p.kill()
            p.wait(timeout=30)
    return codes


def compare_pairs(output: str, tree: str) -> list[dict]:
    """Each consecutive pair of runs in `output` compared by the `collbench compare` of checkout
    `tree`: exit code, verdict (where that compare says one), rows flagged and matched."""
    from orchestrator.analysis.compare import COLUMNS, run_loads
    from orchestrator.results import dataset

    runs = dataset.runs(output)
    loads = {r: run_loads(dataset.load_table(output, r, columns=COLUMNS))[0] for r in runs}
    out = []
    for a, b in itertools.pairwise(runs):
        proc = subprocess.run([sys.executable, "-m", "orchestrator", "compare", output, "--baseline-run", a,
                               "--new-run", b, "--format", "json"], cwd=tree, capture_output=True, text=True,
                              timeout=COMPARE_TIMEOUT_S, check=False)
        tables = json.loads(proc.stdout)["tables"] if proc.stdout.startswith("{") else {}
        matched = tables.get("matched", [])
        summary = (tables.get("summary") or [{}])[0]
        flagged = [f"{r['collective']} {r['msg_bytes']} {r['busbw_change']:+.0%}" for r in matched if r["flag"]]
        out.append({"baseline": a, "new": b, "exit": proc.returncode, "verdict": summary.get("verdict"),
                    "flagged": len(flagged), "matched": len(matched), "examples": flagged[:3],
                    "oversub": [loads[r].oversubscription for r in (a, b)],
                    "load_per_cpu": [loads[r].load_per_cpu for r in (a, b)]})
    return out


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output", required=True, help="the results folder the runs go to (or are in)")
    ap.add_argument("--runs", type=int, default=21, help="default runs back to back (n - 1 compares)")
    ap.add_argument("--load-cores", type=int, default=1, help="busy loops started beside the runs")
    ap.add_argument("--compare-only", action="store_true", help="compare the runs already in --output")
    ap.add_argument("--tree", default=ROOT, help="the checkout whose `collbench compare` judges (default: this one)")
    ap.add_argument("--record", help="append the totals to this JSON-lines file")
    args = ap.parse_args()
    if not args.compare_only:
        runs_back_to_back(args.output, args.runs, args.load_cores)
    pairs = compare_pairs(args.output, os.path.abspath(args.tree))
    print("| baseline run | new run | exit | verdict | flagged / matched | oversubscribed (base, new) | "
          "load per CPU (base, new) | e.g. |")
    print("|---|---|---|---|---|---|---|---|")
    for p in pairs:
        print(f"| {p['baseline']} | {p['new']} | {p['exit']} | {p['verdict'] or '-'} | {p['flagged']} / {p['matched']} | "
              f"{', '.join(map(_fmt, p['oversub']))} | {', '.join(map(_fmt, p['load_per_cpu']))} | "
              f"{'; '.join(p['examples'])} |")
    alarms = sum(p["exit"] == 1 for p in pairs)
    inconclusive = sum(p["verdict"] == "inconclusive" for p in pairs)
    errors = sum(p["exit"] not in (0, 1, 3) for p in pairs)  # 3: inconclusive
    print(f"\nfalse alarms (exit 1): {alarms} of {len(pairs)} compares; inconclusive: {inconclusive}; "
          f"errors: {errors}; compare of {args.tree}")
    if args.record:
        with open(args.record, "a") as f:
            f.write(json.dumps({"at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                                "output": args.output, "tree": args.tree, "load_cores": args.load_cores,
                                "compares": len(pairs), "alarms": alarms, "inconclusive": inconclusive,
                                "errors": errors, "pairs": pairs}) + "\n")


if __name__ == "__main__":
    main()
