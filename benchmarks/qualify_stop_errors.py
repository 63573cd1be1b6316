"""A qualification stopped early (SIGUSR1 ahead of a Slurm time limit: Qualifier.stop) against the
same clusters finished: the real qualifier on seeded simulated clusters (benchmarks/qualify_rates.py's
faults and noise profiles, no expected value), stopped after a quarter, a half and three quarters of
the rounds the finished qualification took. Per cell: false positives (healthy nodes named, %), the
culprits named so far (%; the rest are unsettled, never passed), and the healthy nodes left unsettled
(%), beside the finished qualification's false-positive and false-negative rates.

    python benchmarks/qualify_stop_errors.py [--profiles lab,gpu,shared] [--sizes 3,4,8,16,64,256] [--clusters 40]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.qualify_rates import FAULTS, NOISE, plant
from benchmarks.qualify_simulator import simulate
from orchestrator.sweep.qualify import Outcome

FRACTIONS = (0.25, 0.5, 0.75)


def cell(fault: str, n: int, noise, clusters: int, seed: int) -> str:
    rng = random.Random(f"{seed}-{fault}-{n}-stop")
    counts = {f: [0, 0, 0] for f in (*FRACTIONS, 1.0)}  # healthy named, culprits named, healthy unsettled
    healthy = culprits = 0
    for _ in range(clusters):
        model = plant(fault, n, rng, noise, seed=rng.randrange(1 << 30))
        planted = set(model.slow) | set(model.nic_slow) | model.hang | set(model.intermittent)
        healthy, culprits = healthy + n - len(planted), culprits + len(planted)
        whole = simulate(model)
        for f in counts:
            q = whole if f == 1.0 else simulate(model, stop_after=int(f * whole.rounds))
            named = {i for i, v in q.verdicts.items() if v is not Outcome.PASS}
            open_ = set(range(n)) - set(q.verdicts)
            counts[f][0] += len(named - planted)
            counts[f][1] += len(named & planted)
            counts[f][2] += len(open_ - planted)

    def pct(x: int, of: int) -> str:
        return "-" if not of else "0" if x == 0 else f"{100 * x / of:.1f}"
    stopped = [f"{pct(c[0], healthy)} / {pct(c[1], culprits)} / {pct(c[2], healthy)}" for f, c in counts.items()
               if f != 1.0]
    fp, named = counts[1.0][0], counts[1.0][1]
    return " | ".join(stopped + [f"{pct(fp, healthy)} / {pct(culprits - named, culprits)}"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profiles", default="lab,gpu,shared", help="noise profiles (benchmarks/qualify_rates.py)")
    p.add_argument("--sizes", default="3,4,8,16,64,256", help="cluster sizes N")
    p.add_argument("--clusters", type=int, default=40, help="clusters per cell (default: 40)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    t0 = time.monotonic()
    for name in a.profiles.split(","):
        print(f"\n### noise `{name}`, no expected value; {a.clusters} clusters per cell\n")
        print("stopped at a quarter, a half, three quarters of the rounds: FP % / culprits named % / healthy "
              "unsettled %; finished: FP % / FN %\n")
        print("| fault | N | 1/4 | 1/2 | 3/4 | finished |")
        print("|---|---:|---:|---:|---:|---:|")
        for fault in FAULTS:
            for n in map(int, a.sizes.split(",")):
                print(f"| {fault} | {n} | {cell(fault, n, NOISE[name].noise, a.clusters, a.seed)} |", flush=True)
    print(f"\n({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
