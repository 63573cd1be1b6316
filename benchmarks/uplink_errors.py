"""How often the report's switch verdicts are wrong (issue 46): the real peer flags
(orchestrator.analysis.diagnosis.flags with the frame's leaves set, the code `collbench report
--topology` runs) on simulated pairwise runs of N nodes under leaves of 8 (N/8 leaves, one spine),
every node pair measured once at one size, with faults planted: none; one leaf's uplink at 40%
(every pair across it); the uplink and, in another leaf, one node at 40% (its every pair); two
uplinks of two leaves at 40%. A pair's busbw is the base times its slower node's speed, times the
factor of the slower of the two uplinks it crosses, times a log-normal noise factor of the profile's width
(benchmarks/qualify_rates.py's profiles: lab 6%, gpu 2%, shared 27%). Counts over clusters:
uplink false positives (a healthy leaf named in a slow_uplink) and false negatives (a planted
uplink not named); node false positives (a healthy node named slow_node or intermittent, which an
uplink's nodes must not be) and false negatives (a planted node not named).

    python benchmarks/uplink_errors.py [--clusters 20] [--profiles lab,gpu,shared] [--nodes 16,64,256]
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.error_tables import cells, print_tables
from orchestrator.analysis import diagnosis
from orchestrator.analysis.frame import Frame

NODES = (16, 64, 256)
LEAF = 8  # nodes under a leaf
FAULTS = ("none", "uplink 40%", "uplink 40% + node 40%", "two uplinks 40%")
BASE_GBPS = 40.0


def pairwise_frame(node_speed: np.ndarray, leaf: np.ndarray, uplink: np.ndarray, noise: float,
                   rng: np.random.Generator) -> Frame:
    """Every node pair once: base x slower node x each slow uplink crossed x noise; the frame's
    leaves set as `collbench report --topology` sets them."""
    n = len(node_speed)
    a, b = np.triu_indices(n, 1)
    crossed = np.where(leaf[a] != leaf[b], np.minimum(uplink[leaf[a]], uplink[leaf[b]]), 1.0)  # the slower limits
    busbw = BASE_GBPS * np.minimum(node_speed[a], node_speed[b]) * crossed * np.exp(rng.normal(0.0, noise, len(a)))
    ips = np.array([f"10.{i // 250}.{i % 250}.1" for i in range(n)])
    rows = len(a)
    pairs = pa.array(np.stack([ips[a], ips[b]], axis=1).tolist(), pa.list_(pa.string()))
    table = pa.table({
        "run_id": ["r"] * rows, "collective": ["all_reduce"] * rows, "backend": ["nccl"] * rows,
        "dtype": ["float32"] * rows, "op": ["sum"] * rows, "in_place": [True] * rows,
        "msg_bytes": [16 << 20] * rows, "world_size": [2] * rows, "ranks_per_node": [1] * rows,
        "topology": ["inter"] * rows, "pattern": ["pairwise"] * rows, "status": ["ok"] * rows,
        "group_id": [f"g{i}" for i in range(rows)], "busbw_gbps": busbw, "node_ips": pairs, "hosts": pairs,
        "local_ranks": pa.array([[0, 0]] * rows, pa.list_(pa.int64())),
    })
    frame = Frame(table)
    code = {ip: c for c, ip in enumerate(frame.nodes)}
    frame.leaves = {code[ip]: f"leaf{int(leaf[i])}" for i, ip in enumerate(ips)}
    return frame


def plant(fault: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, set, set]:
    """Node speeds, leaves, uplink factors, and what was planted: slow leaves, slow nodes."""
    leaves = max(2, n // LEAF)
    leaf = np.arange(n) * leaves // n
    speed, uplink = np.ones(n), np.ones(leaves)
    chosen = rng.choice(leaves, 2, replace=False).tolist()
    if fault == "none":
        return speed, leaf, uplink, set(), set()
    uplink[chosen[0]] = 0.4
    if fault == "uplink 40%":
        return speed, leaf, uplink, {chosen[0]}, set()
    if fault == "two uplinks 40%":
        uplink[chosen[1]] = 0.4
        return speed, leaf, uplink, set(chosen), set()
    node = int(rng.choice(np.flatnonzero(leaf == chosen[1])))
    speed[node] = 0.4
    return speed, leaf, uplink, {chosen[0]}, {node}


def rates(fault: str, n: int, noise: float, clusters: int, seed: int) -> tuple[float, ...]:
    """Uplink FP, uplink FN, node FP, node FN (shares; nan where nothing of that kind was planted)."""
    rng = np.random.default_rng([seed, n, int(noise * 1000), FAULTS.index(fault)])
    ips = {f"10.{i // 250}.{i % 250}.1": i for i in range(n)}
    up_fp = up_fn = node_fp = node_fn = leaves_healthy = leaves_planted = nodes_healthy = nodes_planted = 0
    for _ in range(clusters):
        speed, leaf, uplink, slow_leaves, slow_nodes = plant(fault, n, rng)
        flags = diagnosis.flags(pairwise_frame(speed, leaf, uplink, noise, rng), 0.10)
        named_leaves = {int(s[4:]) for f in flags if f.kind == "slow_uplink" for s in f.extra["switches"]}
        named_nodes = {ips[ip] for f in flags if f.kind in ("slow_node", "intermittent") for ip in f.nodes}
        # two leaves alone share their pairs across: naming both is naming the path, not a false one
        if len(uplink) == 2 and slow_leaves:
            slow_leaves = {0, 1}
        up_fp += len(named_leaves - slow_leaves)
        up_fn += len(slow_leaves - named_leaves)
        leaves_healthy += len(uplink) - len(slow_leaves)
        leaves_planted += len(slow_leaves)
        node_fp += len(named_nodes - slow_nodes)
        node_fn += len(slow_nodes - named_nodes)
        nodes_healthy += n - len(slow_nodes)
        nodes_planted += len(slow_nodes)

    def share(k: int, m: int) -> float:
        return k / m if m else float("nan")
    return (share(up_fp, leaves_healthy), share(up_fn, leaves_planted), share(node_fp, nodes_healthy),
            share(node_fn, nodes_planted))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clusters", type=int, default=20, help="clusters per cell")
    ap.add_argument("--profiles", default="lab,gpu,shared", help="noise profiles (benchmarks/qualify_rates.py)")
    ap.add_argument("--nodes", default=",".join(map(str, NODES)), help="node counts, comma-separated")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    nodes = [int(x) for x in a.nodes.split(",")]
    print_tables(a.profiles, f"uplink FP % / uplink FN % / node FP % / node FN % (leaves of {LEAF} nodes)",
                 [f"N={n}" for n in nodes], FAULTS,
                 lambda fault, i, noise: cells(rates(fault, nodes[i], noise, a.clusters, a.seed)))


if __name__ == "__main__":
    main()
