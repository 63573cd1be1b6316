"""Start-up cost: the time from a run's start to its first row on N Ray nodes of this host (one CPU
rank each, a pairwise sweep of 1 KiB), and where it goes (connect, probe, workers, first join:
the closing line's `start ...` part). Runs alternate between this checkout and, optionally,
another one (`--against DIR`, a worktree of an older commit), on the same cluster, so that the
host's load falls on both alike.

    python benchmarks/startup.py [--nodes 16] [--repeats 3] [--against /tmp/cb-old]

Needs ray.cluster_utils (fake nodes on this machine: every node shares its IP and CPUs).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SWEEP = ["run", "--ranks-per-node", "1", "--patterns", "pairwise", "--collectives", "all_reduce", "-b", "1K", "-e",
         "1K", "-n", "3", "-w", "1", "-c", "1", "--group-timeout", "120"]


def one_run(tree: str, address: str, env: dict) -> dict:
    out = tempfile.mkdtemp(prefix="cbstart")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "orchestrator", *SWEEP, "--address", address, "--output", out],
                          cwd=tree, env={**env, "PYTHONPATH": tree}, capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    first = re.search(r"first row after ([0-9.]+)s", proc.stdout)
    parts = dict(re.findall(r"(connect|probe|workers|first join) ([0-9.]+)s", proc.stdout))
    return {"wall_s": wall, "first_row_s": float(first.group(1)) if first else None,
            **{k: float(v) for k, v in parts.items()}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--against", help="another checkout to time the same way, alternately")
    a = p.parse_args()
    os.environ.pop("CUDA_VISIBLE_DEVICES", None) if os.environ.get("CUDA_VISIBLE_DEVICES") == "" else None
    from ray.cluster_utils import Cluster

    t0 = time.monotonic()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    for _ in range(a.nodes):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    print(f"{a.nodes} fake nodes up in {time.monotonic() - t0:.0f} s", flush=True)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    trees = [("this checkout", HERE)] + ([("--against", os.path.abspath(a.against))] if a.against else [])
    results: dict[str, list[dict]] = {name: [] for name, _ in trees}
    try:
        for i in range(a.repeats):
            for name, tree in trees:
                r = one_run(tree, cluster.address, env)
                results[name].append(r)
                print(f"run {i + 1} {name}: " + ", ".join(f"{k} {v:.1f}" for k, v in r.items() if v is not None),
                      flush=True)
    finally:
        cluster.shutdown()
    for name, runs in results.items():
        firsts = [r["first_row_s"] for r in runs if r["first_row_s"] is not None]
        print(f"{name}: first row after {statistics.median(firsts):.1f} s median "
              f"({min(firsts):.1f}-{max(firsts):.1f}) over {len(firsts)} run(s)")


if __name__ == "__main__":
    main()
