"""Error rates of `collbench attach`'s straggler verdict (issue 60) on simulated jobs: N ranks in one
data-parallel group, each step every rank computes, then issues the collective; the collective
ends when the last rank has arrived, and the next step starts there. A rank's arrival jitter is
the host's noise, measured on tests/fixtures/flight_recorder/attach_healthy (4 ranks of gloo on
this 2-core host: the median rank is within 1 ms of the group's median arrival, the spread's sd is
5.7 ms, heavy-tailed): here 90% of draws exponential of mean 1 ms and 10% of mean 15 ms. Culprits
arrive LATE ms later each step; each rank's clock may be off by up to SKEW ms (NTP), constant.

Prints one JSON object per scenario: the share of jobs with a healthy rank named (false positive),
the share with a culprit not named (false negative), over JOBS jobs each.

    python benchmarks/attach_errors.py                     # the table of docs/PERFORMANCE.md
    python benchmarks/attach_errors.py --ranks 16 --late 20 --late 20 --skew 2
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from orchestrator.analysis import attach
from orchestrator.sweep.dumps import Trace, TraceOp

COMPUTE_MS, COLLECTIVE_MS = 20.0, 5.0


def job(ranks: int, steps: int, late_ms: list[float], skew_ms: float, rng: random.Random,
        completions: bool = False) -> Trace:
    """One simulated job's records: culprits are ranks 1, 2, ... (one per entry of `late_ms`);
    `completions`: each record also says when the rank saw it finish (NCCL with timing), on the
    rank's own skewed clock."""
    late = {r + 1: ms for r, ms in enumerate(late_ms)}
    skew = {r: rng.uniform(-skew_ms, skew_ms) for r in range(ranks)}
    ops: dict[int, list[TraceOp]] = {r: [] for r in range(ranks)}
    now = 0.0
    for seq in range(1, steps + 1):
        arrive = {}
        for r in range(ranks):
            jitter = rng.expovariate(1 / 15.0) if rng.random() < 0.1 else rng.expovariate(1.0)
            arrive[r] = now + COMPUTE_MS + jitter + late.get(r, 0.0)
        end = max(arrive.values()) + COLLECTIVE_MS
        for r, t in arrive.items():
            ops[r].append(TraceOp(r, seq - 1, "0", "default_pg", seq, "all_reduce", "all_reduce", "float32",
                                  16384, 16384, int((t + skew[r]) * 1e6), None,
                                  int((end + skew[r]) * 1e6) if completions else None))
        now = end
    return Trace(ranks, {r: tuple(v) for r, v in ops.items()}, {"0": tuple(range(ranks))},
                 {"0": "default_pg"}, (), {}, {r: int(now * 1e6) for r in range(ranks)})


def rates(ranks: int, steps: int, late_ms: list[float], skew_ms: float, jobs: int, seed: int = 0,
          min_late_ms: float = 5.0, completions: bool = False) -> dict:
    rng = random.Random(seed)
    culprits = set(range(1, len(late_ms) + 1))
    false_pos = false_neg = 0
    for _ in range(jobs):
        named = {s.rank for s in attach.judge(job(ranks, steps, late_ms, skew_ms, rng, completions),
                                              min_late_ms=min_late_ms).stragglers}
        false_pos += bool(named - culprits)
        false_neg += bool(culprits - named)
    return {"ranks": ranks, "steps": steps, "late_ms": late_ms, "skew_ms": skew_ms, "completions": completions,
            "jobs": jobs,
            "false_positive": false_pos / jobs, "false_negative": false_neg / jobs if culprits else None}


SCENARIOS = [(4, 30, [], 0.0, False), (16, 100, [], 0.0, False), (64, 100, [], 0.0, False),
             (16, 100, [], 2.0, False), (4, 30, [50.0], 0.0, False), (16, 100, [50.0], 2.0, False),
             (64, 100, [10.0], 0.0, False), (16, 100, [20.0, 20.0], 0.0, False), (16, 100, [5.0], 0.0, False),
             (16, 100, [], 10.0, False), (16, 100, [], 30.0, True), (16, 100, [20.0], 30.0, True)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--late", type=float, action="append", default=[], help="a culprit's lateness, ms (repeatable)")
    p.add_argument("--skew", type=float, default=0.0, help="clock offsets up to this, ms")
    p.add_argument("--completions", action="store_true", help="records hold completion times (NCCL with timing)")
    p.add_argument("--jobs", type=int, default=50)
    args = p.parse_args(argv)
    scenarios = [(args.ranks, args.steps, args.late, args.skew, args.completions)] if args.ranks else SCENARIOS
    for ranks, steps, late, skew, completions in scenarios:
        print(json.dumps(rates(ranks, steps, late, skew, args.jobs, completions=completions)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
