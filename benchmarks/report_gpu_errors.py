"""How often the report's GPU verdicts are wrong on an intra-node pair sweep: the real peer flags
(orchestrator.analysis.diagnosis.flags, the code `collbench report` runs) on simulated runs of N
nodes of G GPUs, every GPU pair inside each node measured once at one size (the intra-pairwise
pattern), with faults planted: one node's fabric at 40% (every pair of it), one GPU at a quarter
(its pairs), the two at once (the fabric at 40% and a GPU at 5% of the peers: what a rank whose
CPU was held down did on the lab, where the other pairs of its node read slow too), two GPUs of
one node at a quarter. A pair's busbw is the base times its node's fabric speed times its slower
GPU's speed times a log-normal noise factor of the profile's width (benchmarks/qualify_rates.py's
profiles: lab 6%, gpu 2%, shared 27%). Counts over clusters: GPU false positives (a healthy GPU
named slow_gpu) and false negatives (a planted GPU not named); node false positives (a node
without a planted fabric fault named slow_node: a slow GPU's node is one, unless every pair of it
reads slow) and false negatives (a planted fabric not named).

    python benchmarks/report_gpu_errors.py [--clusters 40] [--profiles lab,gpu,shared] [--gpus 3,4,8]
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

NODES = (2, 4, 16)
GPUS = (3, 4, 8)
FAULTS = ("none", "fabric 40%", "GPU 25%", "fabric 40% + GPU 5%", "two GPUs 25%")
BASE_GBPS = 40.0


def intra_pairs_frame(fabric: np.ndarray, gpu: np.ndarray, noise: float, rng: np.random.Generator) -> Frame:
    """Every GPU pair inside each of len(fabric) nodes of gpu.shape[1] GPUs: the base times the
    node's fabric speed times the slower GPU's speed, log-normal noise of sigma `noise`."""
    n, g = gpu.shape
    a, b = np.triu_indices(g, 1)
    node = np.repeat(np.arange(n), len(a))
    la, lb = np.tile(a, n), np.tile(b, n)
    busbw = BASE_GBPS * fabric[node] * np.minimum(gpu[node, la], gpu[node, lb]) * np.exp(
        rng.normal(0.0, noise, len(node)))
    ips = np.array([f"10.{i // 250}.{i % 250}.1" for i in range(n)])
    rows = len(node)
    table = pa.table({
        "run_id": ["r"] * rows, "collective": ["all_reduce"] * rows, "backend": ["nccl"] * rows,
        "dtype": ["float32"] * rows, "op": ["sum"] * rows, "in_place": [True] * rows,
        "msg_bytes": [16 << 20] * rows, "world_size": [2] * rows, "ranks_per_node": [g] * rows,
        "topology": ["intra"] * rows, "pattern": ["intra-pairwise"] * rows, "status": ["ok"] * rows,
        "group_id": [f"g{i}" for i in range(rows)], "busbw_gbps": busbw,
        "node_ips": pa.array([[ip, ip] for ip in ips[node]], pa.list_(pa.string())),
        "hosts": pa.array([[ip, ip] for ip in ips[node]], pa.list_(pa.string())),
        "local_ranks": pa.array([[int(x), int(y)] for x, y in zip(la, lb)], pa.list_(pa.int64())),
    })
    return Frame(table)


def plant(fault: str, n: int, g: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, set, set]:
    """Speeds (per node's fabric, per GPU) and what was planted: fabrics (nodes), GPUs (node, local)."""
    fabric, gpu = np.ones(n), np.ones((n, g))
    node = int(rng.integers(n))
    locals_ = rng.choice(g, 2, replace=False).tolist()
    if fault == "none":
        return fabric, gpu, set(), set()
    if fault == "fabric 40%":
        fabric[node] = 0.4
        return fabric, gpu, {node}, set()
    if fault == "GPU 25%":
        gpu[node, locals_[0]] = 0.25
        return fabric, gpu, set(), {(node, locals_[0])}
    if fault == "fabric 40% + GPU 5%":
        fabric[node], gpu[node, locals_[0]] = 0.4, 0.05 / 0.4
        return fabric, gpu, {node}, {(node, locals_[0])}
    gpu[node, locals_] = 0.25
    return fabric, gpu, set(), {(node, x) for x in locals_}


def rates(fault: str, n: int, g: int, noise: float, clusters: int, seed: int) -> tuple[float, ...]:
    """GPU FP, GPU FN, node FP, node FN (shares; nan where nothing of that kind was planted)."""
    rng = np.random.default_rng([seed, n, g, int(noise * 1000), FAULTS.index(fault)])
    ips = {f"10.{i // 250}.{i % 250}.1": i for i in range(n)}
    gpu_fp = gpu_fn = node_fp = node_fn = gpus_healthy = gpus_planted = nodes_healthy = nodes_planted = 0
    for _ in range(clusters):
        fabric, gpu, slow_fabrics, slow_gpus = plant(fault, n, g, rng)
        flags = diagnosis.flags(intra_pairs_frame(fabric, gpu, noise, rng), 0.10)
        named_gpus = {(ips[f.nodes[0]], r) for f in flags if f.kind == "slow_gpu" for r in f.ranks}
        named_nodes = {ips[ip] for f in flags if f.kind == "slow_node" for ip in f.nodes}
        gpu_fp += len(named_gpus - slow_gpus)
        gpu_fn += len(slow_gpus - named_gpus)
        gpus_healthy += n * g - len(slow_gpus)
        gpus_planted += len(slow_gpus)
        node_fp += len(named_nodes - slow_fabrics)
        node_fn += len(slow_fabrics - named_nodes)
        nodes_healthy += n - len(slow_fabrics)
        nodes_planted += len(slow_fabrics)

    def share(k: int, m: int) -> float:
        return k / m if m else float("nan")
    return (share(gpu_fp, gpus_healthy), share(gpu_fn, gpus_planted), share(node_fp, nodes_healthy),
            share(node_fn, nodes_planted))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clusters", type=int, default=40, help="clusters per cell")
    ap.add_argument("--profiles", default="lab,gpu,shared", help="noise profiles (benchmarks/qualify_rates.py)")
    ap.add_argument("--nodes", default=",".join(map(str, NODES)), help="node counts, comma-separated")
    ap.add_argument("--gpus", default=",".join(map(str, GPUS)), help="GPUs per node, comma-separated")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    nodes, gpus = [int(x) for x in a.nodes.split(",")], [int(x) for x in a.gpus.split(",")]
    cols = [(n, g) for n in nodes for g in gpus]
    print_tables(a.profiles, "GPU FP % / GPU FN % / node FP % / node FN %", [f"N={n} G={g}" for n, g in cols], FAULTS,
                 lambda fault, i, noise: cells(rates(fault, *cols[i], noise, a.clusters, a.seed)))


if __name__ == "__main__":
    main()
