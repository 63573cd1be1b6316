"""Qualify's error rates as measured figures: the real qualifier (orchestrator.sweep.qualify, the
code `collbench qualify` runs, driven by benchmarks/qualify_rates.py) against seeded
simulated clusters of N = 2 ... 4,096 nodes (one rank each: every probe crosses nodes), per fault,
noise profile, and with or without expected values. Prints, per cell, the false-positive rate (a
healthy node not passed) and the false-negative rate (a culprit passed), and the most rounds.

    python benchmarks/qualify_errors.py [--profiles lab,gpu,shared] [--scale 1.0] [--seed 0]
    python benchmarks/qualify_errors.py --faults common --sizes 5,6,8,16,64,256,1024 --profiles lab,gpu
        (common faults: a share of the nodes slow, a node slow in a share of its probes)
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.qualify_rates import COMMON, FAULTS, NOISE, measure

SIZES = (2, 3, 4, 5, 6, 7, 8, 16, 64, 256, 1024, 4096)
CLUSTERS = {2: 1000, 3: 1000, 4: 1000, 5: 1000, 6: 1000, 7: 1000, 8: 1000, 16: 1000, 64: 500, 256: 200, 1024: 60,
            4096: 30}


def _pct(x: float) -> str:
    return "0" if x == 0 else f"{100 * x:.1f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profiles", default=",".join(NOISE), help=f"noise profiles (default: {','.join(NOISE)})")
    p.add_argument("--scale", type=float, default=1.0, help="multiply the clusters per cell (default: 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--faults", choices=("standard", "common"), default="standard",
                   help="standard: none, one or two culprits, a hang, an intermittent node; common: 10-90%% of the "
                   "nodes' NICs or nodes at a quarter speed, a node slow in 25-75%% of its probes")
    p.add_argument("--sizes", default=",".join(map(str, SIZES)), help=f"cluster sizes N, among {SIZES} (default: all)")
    p.add_argument("--expected", choices=("both", "without", "with"), default="both",
                   help="judge with expected values, without, or both (default)")
    a = p.parse_args()
    sizes = [int(n) for n in a.sizes.split(",")]
    if set(sizes) - set(CLUSTERS):
        p.error(f"--sizes {a.sizes}: each N one of {', '.join(map(str, CLUSTERS))}")
    faults = FAULTS if a.faults == "standard" else COMMON
    t0 = time.monotonic()
    total = 0
    print("clusters per N: " + ", ".join(f"{n}: {max(1, round(CLUSTERS[n] * a.scale))}" for n in sizes))
    for name in a.profiles.split(","):
        profile = NOISE[name]
        for expected in {"both": (False, True), "without": (False,), "with": (True,)}[a.expected]:
            print(f"\n### noise `{name}` ({profile.noise.shape}, width {profile.noise.width}), "
                  f"{'with' if expected else 'without'} expected values\n")
            print("FP % / FN % (most rounds); source of the noise: " + profile.source + "\n")
            print("| fault | " + " | ".join(f"N={n}" for n in sizes) + " |")
            print("|---|" + "---:|" * len(sizes))
            for fault in faults:
                cells = []
                for n in sizes:
                    clusters = max(1, round(CLUSTERS[n] * a.scale))
                    r = measure(fault, n, profile.noise, clusters, expected, a.seed, prior=profile.prior)
                    total += clusters
                    fn = _pct(r.fn_rate) if r.culprits else "-"
                    note = "*" if r.unjudged else ""
                    cells.append(f"{_pct(r.fp_rate)} / {fn}{note} ({r.max_rounds})")
                print(f"| {fault} | " + " | ".join(cells) + " |", flush=True)
    print(f"\n* in some clusters a speed could not be judged (2 nodes without expected values, or a node whose "
          f"only partner failed): said so (JSON `unjudged`), not a silent pass.\n"
          f"{total} clusters in {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
