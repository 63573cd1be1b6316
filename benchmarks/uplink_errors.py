"""How often the report's switch verdicts are wrong (issue 46): the real peer flags
(orchestrator.analysis.diagnosis.flags with the frame's leaves set, the code `collbench report
--topology` runs) on simulated pairwise runs of N nodes under leaves of 8 (N/8 leaves, one spine),
every node pair measured once at one size, with faults planted: none; one leaf's uplink at 40%
(every pair across it); the uplink and, in another leaf, one node at 40% (its every pair); two
uplinks of two leaves at 40%. A pair's busbw is the base times its slower node's speed, times the
factor of the slower of the two uplinks it crosses, times a log-normal noise factor of the profile's width
(benchmarks/qualify_rates.py's profiles: lab 6%, gpu 2%, shared 27%). With `--contention`, pairs
share a slow uplink as the lab's do: the pairs run in rounds (every node once per round, the circle
method), a slow uplink carries its factor times the leaf's node links (40%: 0.4 x 8 links), a pair
across it gets its round's share (that capacity over the round's pairs across it, at most one
link) times an unequal share of the flows (log-normal, sigma 0.15) where that share is below one
link (a healthy uplink carries its leaf's links at full rate: no sharing). Counts over clusters:
uplink false positives (a healthy leaf named in a slow_uplink) and false negatives (a planted
uplink not named); node false positives (a healthy node named slow_node or intermittent, which an
uplink's nodes must not be) and false negatives (a planted node not named).

    python benchmarks/uplink_errors.py [--clusters 20] [--profiles lab,gpu,shared] [--nodes 16,64,256]
        [--leaf 8] [--contention]
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
LEAF = 8  # nodes under a leaf (--leaf)
SHARE_SIGMA = 0.15  # how unequally the flows of one round share a congested uplink (--contention)
FAULTS = ("none", "uplink 40%", "uplink 40% + node 40%", "two uplinks 40%")
BASE_GBPS = 40.0


def rounds(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair of n nodes once (n even), in n - 1 rounds of n / 2 (the circle method): a, b, round."""
    ring = list(range(1, n))
    a, b, r = [], [], []
    for k in range(n - 1):
        order = [0, *ring[k:], *ring[:k]]
        for i in range(n // 2):
            x, y = sorted((order[i], order[n - 1 - i]))
            a.append(x), b.append(y), r.append(k)
    return np.array(a), np.array(b), np.array(r)


def crossing(a: np.ndarray, b: np.ndarray, rnd: np.ndarray, leaf: np.ndarray, uplink: np.ndarray,
             contention: bool, leaf_nodes: int, rng: np.random.Generator) -> np.ndarray:
    """Each pair's factor from the uplinks it crosses: the slower limits; under contention a slow
    uplink's capacity (its factor x the leaf's node links) is shared by its round's pairs across it."""
    across = leaf[a] != leaf[b]
    if not contention:
        return np.where(across, np.minimum(uplink[leaf[a]], uplink[leaf[b]]), 1.0)
    factor = np.ones(len(a))
    for up in range(len(uplink)):
        mine = across & ((leaf[a] == up) | (leaf[b] == up))
        for k in np.unique(rnd[mine]):
            now = mine & (rnd == k)
            fair = uplink[up] * leaf_nodes / now.sum()
            if fair >= 1:  # the pairs' own links limit them, not the uplink: no sharing
                continue
            share = np.exp(rng.normal(0.0, SHARE_SIGMA, now.sum()))
            factor[now] = np.minimum(factor[now], np.minimum(share / share.mean() * fair, 1.0))
    return factor


def pairwise_frame(node_speed: np.ndarray, leaf: np.ndarray, uplink: np.ndarray, noise: float,
                   rng: np.random.Generator, contention: bool = False, leaf_nodes: int = LEAF) -> Frame:
    """Every node pair once: base x slower node x the uplinks crossed x noise; the frame's leaves
    set as `collbench report --topology` sets them."""
    n = len(node_speed)
    a, b, rnd = rounds(n)
    crossed = crossing(a, b, rnd, leaf, uplink, contention, leaf_nodes, rng)
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


def plant(fault: str, n: int, rng: np.random.Generator, leaf_nodes: int = LEAF
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, set, set]:
    """Node speeds, leaves, uplink factors, and what was planted: slow leaves, slow nodes."""
    leaves = max(2, n // leaf_nodes)
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


def rates(fault: str, n: int, noise: float, clusters: int, seed: int, leaf_nodes: int = LEAF,
          contention: bool = False) -> tuple[float, ...]:
    """Uplink FP, uplink FN, node FP, node FN (shares; nan where nothing of that kind was planted)."""
    rng = np.random.default_rng([seed, n, int(noise * 1000), FAULTS.index(fault)])
    ips = {f"10.{i // 250}.{i % 250}.1": i for i in range(n)}
    up_fp = up_fn = node_fp = node_fn = leaves_healthy = leaves_planted = nodes_healthy = nodes_planted = 0
    for _ in range(clusters):
        speed, leaf, uplink, slow_leaves, slow_nodes = plant(fault, n, rng, leaf_nodes)
        flags = diagnosis.flags(pairwise_frame(speed, leaf, uplink, noise, rng, contention, leaf_nodes), 0.10)
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
    ap.add_argument("--leaf", type=int, default=LEAF, help="nodes under a leaf")
    ap.add_argument("--contention", action="store_true",
                    help="pairs across a slow uplink share it per round, unequally (see above)")
    a = ap.parse_args()
    nodes = [int(x) for x in a.nodes.split(",")]
    if any(n % 2 or n < 2 * a.leaf for n in nodes):
        ap.error(f"--nodes {a.nodes}: each an even count of at least two leaves of {a.leaf}")
    shared = ", sharing a slow uplink per round" if a.contention else ""
    print_tables(a.profiles, f"uplink FP % / uplink FN % / node FP % / node FN % (leaves of {a.leaf} nodes{shared})",
                 [f"N={n}" for n in nodes], FAULTS,
                 lambda fault, i, noise: cells(rates(fault, nodes[i], noise, a.clusters, a.seed, a.leaf,
                                                     a.contention)))


if __name__ == "__main__":
    main()
