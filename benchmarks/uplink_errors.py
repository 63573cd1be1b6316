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

`--spine K`: K leaves under each spine, the spines under one core, and the faults: none; a spine's
uplink at 40%; that and a leaf's under another spine; that and a node under another spine (switch
false positives then count every healthy switch named, the leaves below a slow spine among them);
`--leaves-only`: the report given the leaves alone (before spines were judged).

    python benchmarks/uplink_errors.py [--clusters 20] [--profiles lab,gpu,shared] [--nodes 16,64,256]
        [--leaf 8] [--contention] [--spine K] [--leaves-only]
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
from orchestrator.sweep.topology import path

NODES = (16, 64, 256)
LEAF = 8  # nodes under a leaf (--leaf)
SHARE_SIGMA = 0.15  # how unequally the flows of one round share a congested uplink (--contention)
FAULTS = ("none", "uplink 40%", "uplink 40% + node 40%", "two uplinks 40%")
SPINE_FAULTS = ("none", "spine 40%", "spine 40% + uplink 40%", "spine 40% + node 40%")
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


def crossing(a: np.ndarray, b: np.ndarray, rnd: np.ndarray, below: list[np.ndarray], factors: list[float],
             contention: bool, rng: np.random.Generator) -> np.ndarray:
    """Each pair's factor from the slow uplinks it crosses (`below[i]`: which nodes are under switch
    i, `factors[i]` its uplink's): the slower limits; under contention a slow uplink's capacity (its
    factor x the node links below it) is shared by its round's pairs across it."""
    factor = np.ones(len(a))
    for members, uplink in zip(below, factors):
        if uplink >= 1:  # a healthy uplink carries the links below it at full rate
            continue
        mine = members[a] != members[b]
        if not contention:
            factor[mine] = np.minimum(factor[mine], uplink)
            continue
        for k in np.unique(rnd[mine]):
            now = mine & (rnd == k)
            fair = uplink * members.sum() / now.sum()
            if fair >= 1:  # the pairs' own links limit them, not the uplink: no sharing
                continue
            share = np.exp(rng.normal(0.0, SHARE_SIGMA, now.sum()))
            factor[now] = np.minimum(factor[now], np.minimum(share / share.mean() * fair, 1.0))
    return factor


def pairwise_frame(node_speed: np.ndarray, leaf: np.ndarray, uplink: dict[str, float], noise: float,
                   rng: np.random.Generator, contention: bool = False, parents: dict[str, str] | None = None) -> Frame:
    """Every node pair once: base x slower node x the uplinks crossed (`uplink`: switch -> factor; a
    leaf `leafI`, or a switch above leaves in `parents`) x noise; the frame's leaves and parents set
    as `collbench report --topology` sets them."""
    n = len(node_speed)
    a, b, rnd = rounds(n)
    names = [f"leaf{int(x)}" for x in leaf]
    below = [np.array([s in path(name, parents or {}) for name in names]) for s in uplink]
    crossed = crossing(a, b, rnd, below, list(uplink.values()), contention, rng)
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
    frame.leaves = {code[ip]: names[i] for i, ip in enumerate(ips)}
    frame.parents = dict(parents or {})
    return frame


def plant(fault: str, n: int, rng: np.random.Generator, leaf_nodes: int = LEAF, spine_leaves: int = 0
          ) -> tuple[np.ndarray, np.ndarray, dict, dict, set, set]:
    """Node speeds, leaves, slow uplinks (switch -> factor), the switch -> parent map (spines of
    `spine_leaves` leaves under one core; {} without), and what was planted: slow switches, slow nodes."""
    leaves = max(2, n // leaf_nodes)
    leaf = np.arange(n) * leaves // n
    speed = np.ones(n)
    if spine_leaves:
        parents = {f"leaf{i}": f"spine{i // spine_leaves}" for i in range(leaves)}
        spines = sorted(set(parents.values()), key=lambda s: int(s[5:]))
        parents.update({s: "core" for s in spines})
        if fault == "none":
            return speed, leaf, {}, parents, set(), set()
        slow_spine, other = (spines[i] for i in rng.choice(len(spines), 2, replace=False))
        uplink = {slow_spine: 0.4}
        under = [int(x[4:]) for x, s in parents.items() if s == other]
        if fault == "spine 40% + uplink 40%":
            uplink[f"leaf{int(rng.choice(under))}"] = 0.4
        slow = set()
        if fault == "spine 40% + node 40%":
            slow = {int(rng.choice(np.flatnonzero(np.isin(leaf, under))))}
            speed[list(slow)] = 0.4
        return speed, leaf, uplink, parents, set(uplink), slow
    chosen = rng.choice(leaves, 2, replace=False).tolist()
    if fault == "none":
        return speed, leaf, {}, {}, set(), set()
    uplink = {f"leaf{chosen[0]}": 0.4}
    if fault == "uplink 40%":
        return speed, leaf, uplink, {}, set(uplink), set()
    if fault == "two uplinks 40%":
        uplink[f"leaf{chosen[1]}"] = 0.4
        return speed, leaf, uplink, {}, set(uplink), set()
    node = int(rng.choice(np.flatnonzero(leaf == chosen[1])))
    speed[node] = 0.4
    return speed, leaf, uplink, {}, set(uplink), {node}


def rates(fault: str, n: int, noise: float, clusters: int, seed: int, leaf_nodes: int = LEAF,
          contention: bool = False, spine_leaves: int = 0, leaves_only: bool = False) -> tuple[float, ...]:
    """Switch FP, switch FN, node FP, node FN (shares; nan where nothing of that kind was planted)."""
    faults = SPINE_FAULTS if spine_leaves else FAULTS
    rng = np.random.default_rng([seed, n, int(noise * 1000), faults.index(fault)])
    ips = {f"10.{i // 250}.{i % 250}.1": i for i in range(n)}
    up_fp = up_fn = node_fp = node_fn = leaves_healthy = leaves_planted = nodes_healthy = nodes_planted = 0
    for _ in range(clusters):
        speed, leaf, uplink, parents, slow_leaves, slow_nodes = plant(fault, n, rng, leaf_nodes, spine_leaves)
        frame = pairwise_frame(speed, leaf, uplink, noise, rng, contention, parents)
        if leaves_only:  # the report given the leaves and not the switches above them
            frame.parents = {}
        flags = diagnosis.flags(frame, 0.10)
        named_leaves = {s for f in flags if f.kind == "slow_uplink" for s in f.extra["switches"]}
        named_nodes = {ips[ip] for f in flags if f.kind in ("slow_node", "intermittent") for ip in f.nodes}
        switches = {f"leaf{int(x)}" for x in set(leaf)} | (set(parents.values()) - {"core"})
        # two leaves alone share their pairs across: naming both is naming the path, not a false one
        if len(switches) == 2 and slow_leaves:
            slow_leaves = set(switches)
        up_fp += len(named_leaves - slow_leaves)
        up_fn += len(slow_leaves - named_leaves)
        leaves_healthy += len(switches) - len(slow_leaves)
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
    ap.add_argument("--spine", type=int, default=0,
                    help="leaves under each spine, the spines under one core, and the spine faults (default: 0)")
    ap.add_argument("--leaves-only", action="store_true",
                    help="the report given the leaves and not the spines above them (as before spines were judged)")
    a = ap.parse_args()
    nodes = [int(x) for x in a.nodes.split(",")]
    if any(n % 2 or n < 2 * a.leaf * max(a.spine, 1) for n in nodes):
        ap.error(f"--nodes {a.nodes}: each an even count of at least two leaves of {a.leaf}"
                 + (f" under each of two spines of {a.spine}" if a.spine else ""))
    shared = ", sharing a slow uplink per round" if a.contention else ""
    spines = (f", {a.spine} leaves under a spine" if a.spine else "") + (", spines not given" if a.leaves_only else "")
    print_tables(a.profiles, f"uplink FP % / uplink FN % / node FP % / node FN % (leaves of {a.leaf} nodes{spines}"
                 f"{shared})", [f"N={n}" for n in nodes], SPINE_FAULTS if a.spine else FAULTS,
                 lambda fault, i, noise: cells(rates(fault, nodes[i], noise, a.clusters, a.seed, a.leaf,
                                                     a.contention, a.spine, a.leaves_only)))


if __name__ == "__main__":
    main()
