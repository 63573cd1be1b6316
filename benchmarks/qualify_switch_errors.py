"""How often qualify's switch verdicts are wrong (issue 46): the real Qualifier (the code `collbench
qualify --topology` runs) against simulated clusters of N nodes under leaves of `--leaf` nodes
(benchmarks/qualify_simulator.py: a slow uplink carries its factor times its leaf's node links,
shared by the probes of a round that cross it, unequally, log-normal sigma 0.15, as the lab
measured; a healthy uplink carries its leaf's links at full rate), one rank per node, no expected
value, with faults planted: none; one leaf's uplink at 40%; that and, in another leaf, one node
at 40%; two leaves' uplinks at 40%. Noise per probe: the profiles of benchmarks/qualify_rates.py
(log-normal; lab 6%, gpu 2%, shared 27%). Counts over clusters: uplink false positives (a healthy
leaf named in a slow_uplink; with two leaves, naming both is naming the path), uplink false
negatives (a planted uplink not named), node false positives (a healthy node named, which an
uplink's nodes must not be), node false negatives (the planted node passed); and the most rounds.
`--without`: the same clusters qualified without the switch tree (what qualify did before).
`--leaves-only`: the leaves given, not the spines (what qualify did before it judged them).
`--spine K`: a deeper tree, K leaves under each spine switch and the spines under one core, with
the faults: none; one spine's uplink at 40% (its leaves' links to the rest shared at that factor);
that and, under another spine, one leaf's uplink at 40%; that and, under another spine, one node
at 40%. Switch false positives then count every healthy switch (leaves and spines) named: the
leaves below a slow spine must not be.

    python benchmarks/qualify_switch_errors.py [--clusters 20] [--profiles lab,gpu,shared]
        [--nodes 16,64,256] [--leaf 8] [--uplink 0.4] [--without] [--spine K] [--leaves-only]
"""

from __future__ import annotations

import argparse
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.error_tables import cells, print_tables
from benchmarks.qualify_simulator import Model, Noise, simulate
from orchestrator.sweep.qualify_types import Outcome

NODES = (16, 64, 256)
LEAF = 8
FAULTS = ("none", "uplink 40%", "uplink 40% + node 40%", "two uplinks 40%")
SPINE_FAULTS = ("none", "spine 40%", "spine 40% + uplink 40%", "spine 40% + node 40%")


def plant(fault: str, n: int, leaf_nodes: int, rng: random.Random,
          factor: float = 0.4) -> tuple[tuple[str, ...], dict, dict]:
    """Each node's leaf, the slow uplinks (leaf -> factor), the slow nodes (node -> factor)."""
    count = max(2, n // leaf_nodes)
    leaves = tuple(f"leaf{i * count // n}" for i in range(n))
    chosen = rng.sample(range(count), 2)
    if fault == "none":
        return leaves, {}, {}
    uplink = {f"leaf{chosen[0]}": factor}
    if fault == "two uplinks 40%":
        uplink[f"leaf{chosen[1]}"] = factor
    slow = {}
    if fault == "uplink 40% + node 40%":
        slow = {rng.choice([i for i in range(n) if leaves[i] == f"leaf{chosen[1]}"]): 0.4}
    return leaves, uplink, slow


def plant_spines(fault: str, n: int, leaf_nodes: int, spine_leaves: int, rng: random.Random,
                 factor: float = 0.4) -> tuple[tuple[str, ...], dict, dict, dict]:
    """plant's, under spines of `spine_leaves` leaves (and the switch -> parent map): a slow spine,
    and a slow leaf or node under another spine."""
    leaves = tuple(f"leaf{i * max(2, n // leaf_nodes) // n}" for i in range(n))
    parents = {leaf: f"spine{int(leaf[4:]) // spine_leaves}" for leaf in set(leaves)}
    spines = sorted(set(parents.values()))
    parents.update({s: "core" for s in spines})
    if fault == "none":
        return leaves, {}, {}, parents
    slow_spine, other = rng.sample(spines, 2)
    uplink, slow = {slow_spine: factor}, {}
    under = sorted(leaf for leaf in set(leaves) if parents[leaf] == other)
    if fault == "spine 40% + uplink 40%":
        uplink[rng.choice(under)] = factor
    if fault == "spine 40% + node 40%":
        slow = {rng.choice([i for i in range(n) if leaves[i] in under]): 0.4}
    return leaves, uplink, slow, parents


def rates(fault: str, n: int, noise: float, clusters: int, seed: int, leaf_nodes: int,
          without: bool = False, factor: float = 0.4, spine_leaves: int = 0,
          leaves_only: bool = False) -> tuple[float, ...]:
    rng = random.Random(f"{seed}-{n}-{noise}-{fault}")
    up_fp = up_fn = node_fp = node_fn = leaves_healthy = leaves_planted = nodes_healthy = nodes_planted = 0
    most = 0
    for k in range(clusters):
        if spine_leaves:
            leaves, uplink, slow, parents = plant_spines(fault, n, leaf_nodes, spine_leaves, rng, factor)
        else:
            (leaves, uplink, slow), parents = plant(fault, n, leaf_nodes, rng, factor), {}
        model = Model(n, 1, noise=Noise(noise, "lognormal"), seed=rng.randrange(1 << 30), leaves=leaves,
                      uplink=uplink, slow=slow, parents=parents)
        q = simulate(model, leaves=() if without else leaves if leaves_only else None)
        named = {s for u in q.uplinks for s in u.switches}
        planted = set(uplink) | (set(leaves) if uplink and len(set(leaves)) == 2 else set())
        switches = set(leaves) | (set(parents.values()) - {"core"})
        up_fp += len(named - planted)
        up_fn += len(set(uplink) - named)
        leaves_healthy += len(switches) - len(planted)
        leaves_planted += len(uplink)
        bad = {i for i, v in q.verdicts.items() if v is not Outcome.PASS}
        node_fp += len(bad - set(slow))
        node_fn += len(set(slow) - bad)
        nodes_healthy += n - len(slow)
        nodes_planted += len(slow)
        most = max(most, q.rounds)

    def share(x: int, m: int) -> float:
        return x / m if m else float("nan")
    return (share(up_fp, leaves_healthy), share(up_fn, leaves_planted), share(node_fp, nodes_healthy),
            share(node_fn, nodes_planted), most)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clusters", type=int, default=20, help="clusters per cell (default: 20)")
    ap.add_argument("--profiles", default="lab,gpu,shared", help="noise profiles (benchmarks/qualify_rates.py)")
    ap.add_argument("--nodes", default=",".join(map(str, NODES)), help="node counts, comma-separated")
    ap.add_argument("--leaf", type=int, default=LEAF, help=f"nodes under a leaf (default: {LEAF})")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--uplink", type=float, default=0.4,
                    help="a slow uplink's share of its leaf's links (default: 0.4; the faults' names keep 40%%)")
    ap.add_argument("--without", action="store_true", help="qualify without the switch tree (the before-figure)")
    ap.add_argument("--spine", type=int, default=0,
                    help="leaves under each spine, the spines under one core, and the spine faults (default: 0, "
                    "one spine over every leaf)")
    ap.add_argument("--leaves-only", action="store_true",
                    help="qualify given the leaves and not the spines above them (as before spines were judged)")
    a = ap.parse_args()
    nodes = [int(x) for x in a.nodes.split(",")]
    if any(n < 2 * a.leaf for n in nodes):
        ap.error(f"--nodes {a.nodes}: each at least two leaves of {a.leaf}")
    if a.spine and any(n < 2 * a.leaf * a.spine for n in nodes):
        ap.error(f"--nodes {a.nodes}: each at least two spines of {a.spine} leaves of {a.leaf}")

    def cell(fault: str, i: int, noise: float) -> str:
        *shares, most = rates(fault, nodes[i], noise, a.clusters, a.seed, a.leaf, a.without, a.uplink, a.spine,
                              a.leaves_only)
        return f"{cells(shares)} ({most})"
    without = "; qualified WITHOUT the switch tree" if a.without else \
        "; qualified with the leaves alone (spines not judged)" if a.leaves_only else ""
    spines = f", {a.spine} leaves under a spine" if a.spine else ""
    print_tables(a.profiles, f"switch FP % / switch FN % / node FP % / node FN % (most rounds); leaves of {a.leaf} "
                 f"nodes{spines}, a slow uplink at {a.uplink:g} of them shared per round{without}",
                 [f"N={n}" for n in nodes], SPINE_FAULTS if a.spine else FAULTS, cell)


if __name__ == "__main__":
    main()
