"""Verdict error rates on a fabric shape given on the command line (issue 55): N nodes, any number
of slow parts (a share of the nodes at a factor of the healthy speed, each part on nodes of its
own), a noise profile (benchmarks/qualify_rates.py: lab 6%, gpu 2%, shared 27%, log-normal), and the
consumer that judges them: qualify (the real Qualifier, benchmarks/qualify_simulator.py) or the
report (the real peer flags, orchestrator.analysis.diagnosis, on a pairwise run of every node pair
at one size). Prints one JSON object: the rates of false positives (healthy nodes named) and false
negatives (planted nodes passed), and how many clusters were said to "agree" although a part was
planted (`false_agree`), and how many said neither (`cannot_tell`: no node named and no agreement:
a "cannot tell" line where a slower mode was seen but no node could be named, or flags of pairs only).

    python benchmarks/fabric_errors.py --nodes 16 --slow 0.5@0.7 --noise lab --consumer qualify
    python benchmarks/fabric_errors.py --nodes 32 --slow 0.3@0.25 --slow 0.3@0.6 --consumer report
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.qualify_rates import BASE_GBPS, NOISE
from benchmarks.qualify_simulator import Model, simulate
from benchmarks.report_node_errors import pairwise_frame
from orchestrator.analysis import diagnosis
from orchestrator.sweep.qualify_types import Outcome

NAMED = ("slow_node", "intermittent")


def part(text: str) -> tuple[float, float]:
    """SHARE@FACTOR: that share of the nodes at that factor of the healthy speed."""
    try:
        share, factor = (float(v) for v in text.split("@"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--slow {text!r}: SHARE@FACTOR, e.g. 0.5@0.7") from None
    if not (0 < share < 1 and 0 < factor < 1):
        raise argparse.ArgumentTypeError(f"--slow {text!r}: share and factor each between 0 and 1")
    return share, factor


def plant(n: int, parts: list[tuple[float, float]], rng: random.Random) -> dict[int, float]:
    """Each part's nodes (round(share N), at least one), drawn apart; two or more nodes stay healthy."""
    nodes = list(range(n))
    rng.shuffle(nodes)
    slow: dict[int, float] = {}
    for share, factor in parts:
        for node in nodes[len(slow):len(slow) + max(1, round(share * n))]:
            slow[node] = factor
    if n - len(slow) < 2:
        raise SystemExit(f"fabric_errors: error: the parts leave {n - len(slow)} healthy node(s) of {n}; keep two")
    return slow


def judged(consumer: str, n: int, slow: dict[int, float], profile, seed: int) -> tuple[set[int], bool]:
    """(Nodes named, whether an agreement was said) for one cluster."""
    if consumer == "qualify":
        q = simulate(Model(n, 1, BASE_GBPS, slow=slow, noise=profile.noise, seed=seed), prior=profile.prior)
        said = q.agreement() or ""
        return {i for i, v in q.verdicts.items() if v is not Outcome.PASS}, said.startswith("all ")
    speeds = np.array([slow.get(i, 1.0) for i in range(n)])
    frame = pairwise_frame(speeds, profile.noise.width, np.random.default_rng(seed), {})
    found, agreed = diagnosis.judge(frame, 0.10)
    ips = {f"10.{i // 250}.{i % 250}.1": i for i in range(n)}
    return {ips[ip] for f in found if f.kind in NAMED for ip in f.nodes}, (agreed or "").startswith("all ")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, required=True, help="nodes in each cluster (N)")
    ap.add_argument("--slow", type=part, action="append", default=[], metavar="SHARE@FACTOR",
                    help="a share of the nodes at a factor of the healthy speed (repeat for several rates; none: a "
                    "healthy fabric)")
    ap.add_argument("--noise", choices=list(NOISE), default="lab", help="noise profile (default: lab)")
    ap.add_argument("--consumer", choices=("qualify", "report"), default="qualify")
    ap.add_argument("--clusters", type=int, default=40, help="clusters simulated (default: 40)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.nodes < 2 or args.clusters < 1:
        ap.error(f"--nodes {args.nodes} --clusters {args.clusters}: at least 2 nodes and 1 cluster")
    profile, rng = NOISE[args.noise], random.Random(args.seed)
    fp = fn = healthy = planted = false_agree = cannot_tell = missed_clusters = 0
    for c in range(args.clusters):
        slow = plant(args.nodes, args.slow, rng)
        named, agreed = judged(args.consumer, args.nodes, slow, profile, args.seed * 100_003 + c)
        fp += len(named - set(slow))
        fn += len(set(slow) - named)
        healthy += args.nodes - len(slow)
        planted += len(slow)
        false_agree += bool(slow) and agreed
        cannot_tell += not named and not agreed
        missed_clusters += bool(slow) and not named
    print(json.dumps({
        "nodes": args.nodes, "slow": [f"{s:g}@{f:g}" for s, f in args.slow], "noise": args.noise,
        "consumer": args.consumer, "clusters": args.clusters, "seed": args.seed,
        "fp_rate": round(fp / max(healthy, 1), 4), "fn_rate": round(fn / planted, 4) if planted else None,
        "clusters_missed": missed_clusters, "false_agree": false_agree, "cannot_tell": cannot_tell,
    }))


if __name__ == "__main__":
    main()
