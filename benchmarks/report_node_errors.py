"""How often the report's node verdicts are wrong on a pairwise sweep: the real peer flags
(orchestrator.analysis.diagnosis.flags, the code `collbench report` runs) on simulated runs of N
nodes, every node pair measured once at one size, with common faults planted (issue 42): a share
of the nodes at a quarter speed (every pair of such a node runs at a quarter), two nodes at a fifth
and half (the issue's 5-node lab), and one node slow at half speed in a share of its pairs
(intermittent). A pair's busbw is the base times its slower node's speed times a log-normal noise
factor of the profile's width (benchmarks/qualify_rates.py's profiles: lab 6%, gpu 2%, shared 27%).
Counts, over clusters: false positives (a healthy node named slow_node or intermittent) and false
negatives (a planted node not named).

    python benchmarks/report_node_errors.py [--clusters 40] [--profiles lab,gpu,shared] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import re
import sys

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.error_tables import cells, print_tables
from orchestrator.analysis import diagnosis
from orchestrator.analysis.frame import Frame

SIZES = (5, 6, 8, 16, 64, 256, 1024)
SHARES = (0.1, 0.3, 0.5, 0.7, 0.9)
FAULTS = ("none", *(f"4x on {s:.0%}" for s in SHARES), "1/5 and 1/2", *(f"intermittent 2x in {s:.0%}"
                                                                       for s in (0.25, 0.5, 0.75)))
NAMED = ("slow_node", "intermittent")
BASE_GBPS = 10.0


def pairwise_frame(speeds: np.ndarray, noise: float, rng: np.random.Generator, flapping: dict[int, float]) -> Frame:
    """One run of every pair of len(speeds) nodes, each at its slower node's speed (a flapping node:
    at half in that share of its pairs), log-normal noise of sigma `noise`."""
    n = len(speeds)
    a, b = np.triu_indices(n, 1)
    slow = np.minimum(speeds[a], speeds[b])
    for node, share in flapping.items():
        hit = ((a == node) | (b == node)) & (rng.random(len(a)) < share)
        slow = np.where(hit, np.minimum(slow, 0.5), slow)
    busbw = BASE_GBPS * slow * np.exp(rng.normal(0.0, noise, len(a)))
    ips = np.array([f"10.{i // 250}.{i % 250}.1" for i in range(n)])
    rows = len(a)
    pairs = pa.array([[x, y] for x, y in zip(ips[a], ips[b])], pa.list_(pa.string()))
    table = pa.table({
        "run_id": ["r"] * rows, "collective": ["all_reduce"] * rows, "backend": ["gloo"] * rows,
        "dtype": ["float32"] * rows, "op": ["sum"] * rows, "in_place": [True] * rows,
        "msg_bytes": [16 << 20] * rows, "world_size": [2] * rows, "ranks_per_node": [1] * rows,
        "topology": ["inter"] * rows, "pattern": ["pairwise"] * rows, "status": ["ok"] * rows,
        "group_id": [f"g{i}" for i in range(rows)], "busbw_gbps": busbw,
        "node_ips": pairs, "hosts": pairs, "local_ranks": pa.array([[0, 0]] * rows, pa.list_(pa.int64())),
    })
    return Frame(table)


def plant(fault: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, set[int], dict[int, float]]:
    speeds = np.ones(n)
    if fault == "none":
        return speeds, set(), {}
    if fault == "1/5 and 1/2":
        two = rng.choice(n, 2, replace=False)
        speeds[two] = (0.2, 0.5)
        return speeds, set(two.tolist()), {}
    common = re.fullmatch(r"4x on (\d+)%", fault)
    if common:
        count = min(n - 1, max(1, round(int(common.group(1)) / 100 * n)))
        slow = rng.choice(n, count, replace=False)
        speeds[slow] = 0.25
        return speeds, set(slow.tolist()), {}
    share = int(re.fullmatch(r"intermittent 2x in (\d+)%", fault).group(1)) / 100
    node = int(rng.integers(n))
    return speeds, {node}, {node: share}


def rates(fault: str, n: int, noise: float, clusters: int, seed: int) -> tuple[float, float]:
    rng = np.random.default_rng([seed, n, int(noise * 1000), FAULTS.index(fault)])
    fp = fn = healthy = culprits = 0
    for _ in range(clusters):
        speeds, planted, flapping = plant(fault, n, rng)
        frame = pairwise_frame(speeds, noise, rng, flapping)
        named = {node for f in diagnosis.flags(frame, 0.10) if f.kind in NAMED for node in f.nodes}
        ips = {f"10.{i // 250}.{i % 250}.1": i for i in range(n)}
        named_codes = {ips[ip] for ip in named}
        fp += len(named_codes - planted)
        fn += len(planted - named_codes)
        healthy += n - len(planted)
        culprits += len(planted)
    return fp / max(healthy, 1), (fn / culprits if culprits else float("nan"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clusters", type=int, default=40, help="clusters per cell up to 64 nodes (fewer above)")
    ap.add_argument("--profiles", default="lab,gpu,shared")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]

    def cell(fault: str, i: int, noise: float) -> str:
        n = sizes[i]
        if fault == "1/5 and 1/2" and n < 5:
            return "-"
        clusters = a.clusters if n <= 64 else max(2, a.clusters // (8 if n <= 256 else 20))
        return cells(rates(fault, n, noise, clusters, a.seed))

    print_tables(a.profiles, "FP % / FN %", [f"N={n}" for n in sizes], FAULTS, cell)


if __name__ == "__main__":
    main()
