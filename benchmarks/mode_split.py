"""How often the healthy level's mode split (orchestrator.judging.capacity.fastest_mode) cuts a set of
rates that holds one mode (a false split), and how often it separates two modes d noise sigmas apart
(a slower share of the rates at exp(-d sigma); separated: split, with at most 5% of the rates kept
from the slower mode, where the modes' tails overlap), on log rates with normal or Student-t(3) noise of
sigma `--noise` (log), judged with a platform prior. Prints one JSON line per cell.

    python benchmarks/mode_split.py [--sizes 6,12,24,48,120,496,2016] [--noise 0.06] [--prior gloo-net]
                                    [--gaps 3,4,5,6] [--shares 0.1,0.5,0.9] [--trials 400] [--tails normal]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from orchestrator.judging.capacity import fastest_mode
from orchestrator.judging.judge import PRIORS

PRIOR_NAMES = {"gloo-net": PRIORS[("gloo", True)], "gloo-intra": PRIORS[("gloo", False)], "gpu": PRIORS[("nccl", True)]}


def _noise(rng: np.random.Generator, n: int, sigma: float, tails: str) -> np.ndarray:
    if tails == "normal":
        return rng.normal(0.0, sigma, n)
    return rng.standard_t(3, n) * sigma / np.sqrt(3.0)  # t(3) scaled to the same standard deviation


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="6,12,24,48,120,496,2016", help="rates per set (pairs of 4..64 nodes: 6..2016)")
    ap.add_argument("--noise", type=float, default=0.06, help="sigma of a rate's log (default 0.06: the lab's)")
    ap.add_argument("--prior", choices=list(PRIOR_NAMES), default="gloo-net")
    ap.add_argument("--gaps", default="3,4,5,6", help="the slower mode's distance, in noise sigmas")
    ap.add_argument("--shares", default="0.1,0.5,0.9", help="the slower mode's share of the rates")
    ap.add_argument("--trials", type=int, default=400)
    ap.add_argument("--tails", choices=("normal", "t3"), default="normal")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    prior, rng = PRIOR_NAMES[args.prior], np.random.default_rng(args.seed)
    for n in (int(v) for v in args.sizes.split(",")):
        false = sum(not fastest_mode(_noise(rng, n, args.noise, args.tails), prior).all() for _ in range(args.trials))
        print(json.dumps({"rates": n, "modes": 1, "tails": args.tails, "noise": args.noise, "prior": args.prior,
                          "false_split": round(false / args.trials, 4)}), flush=True)
        for gap in (float(v) for v in args.gaps.split(",")):
            for share in (float(v) for v in args.shares.split(",")):
                slow = max(1, round(share * n))
                if n - slow < 3 or slow < 3:
                    continue
                found = 0
                for _ in range(args.trials):
                    x = _noise(rng, n, args.noise, args.tails)
                    x[:slow] -= gap * args.noise
                    kept = fastest_mode(x, prior)
                    found += bool(not kept.all() and kept[:slow].mean() <= 0.05)
                print(json.dumps({"rates": n, "gap_sigmas": gap, "slow_share": share, "tails": args.tails,
                                  "separated": round(found / args.trials, 4)}), flush=True)


if __name__ == "__main__":
    main()
