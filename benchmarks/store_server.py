"""The run's rendezvous served in Python (execution.store_server) against torch's own TCPStore server.

1. Throughput: N clients (torch's TCPStore client, one thread each, in this process) form a gloo-like
   full mesh: each sets its key, then gets every rank's: N^2 gets, against each server in turn.
2. `--driver`: the CPU a driver spends on a one-rank `collbench run` (user + sys of its process,
   /usr/bin/time), on a private Ray head; with `--against DIR` alternately with another checkout
   (a worktree of a commit whose driver served torch's store).

    python benchmarks/store_server.py [--ranks 16,64,128] [--driver 5] [--against /tmp/cb-old]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)


def full_mesh_s(port: int, ranks: int) -> float:
    import torch.distributed as dist

    clients = [dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=120)) for _ in range(ranks)]

    def rank(i: int) -> None:
        clients[i].set(f"g/{i}", b"x" * 64)
        for j in range(ranks):
            clients[i].get(f"g/{j}")

    threads = [threading.Thread(target=rank, args=(i,)) for i in range(ranks)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - started


def throughput(ranks: list[int]) -> None:
    import torch.distributed as dist

    from orchestrator.execution.store_server import StoreServer

    print("| ranks | gets | Python server s | torch's server s |\n|---:|---:|---:|---:|")
    for n in ranks:
        ours = StoreServer("127.0.0.1")
        theirs = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, use_libuv=True)
        py_s, torch_s = full_mesh_s(ours.port, n), full_mesh_s(theirs.port, n)
        ours.close()
        print(f"| {n} | {n * n:,} | {py_s:.2f} | {torch_s:.2f} |")


def driver_cpu(trees: dict[str, str], repeats: int) -> None:
    from tests.raycluster import RayHead

    head = RayHead()
    cpu: dict[str, list[float]] = {name: [] for name in trees}
    try:
        for _ in range(repeats):
            for name, tree in trees.items():
                out = tempfile.mkdtemp(prefix="cbstore")
                proc = subprocess.run(
                    ["/usr/bin/time", "-f", "cpu %U %S", sys.executable, "-m", "orchestrator", "run", "--output", out,
                     "--ranks-per-node", "1", "-b", "1K", "-e", "4K", "-n", "2"],
                    cwd=tree, env={**head.env(), "PYTHONPATH": tree}, capture_output=True, text=True, timeout=300)
                if proc.returncode != 0:
                    raise SystemExit(f"{tree}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
                user, system = map(float, re.findall(r"^cpu ([0-9.]+) ([0-9.]+)$", proc.stderr, re.M)[-1])
                cpu[name].append(user + system)
    finally:
        head.stop()
    for name, values in cpu.items():
        print(f"{name}: driver CPU median {statistics.median(values):.2f} s "
              f"({min(values):.2f}-{max(values):.2f}, {len(values)} runs)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="16,64,128", help="client counts of the full-mesh test, comma-separated")
    ap.add_argument("--driver", type=int, default=0, metavar="N", help="also time N one-rank runs' driver CPU")
    ap.add_argument("--against", metavar="DIR", help="with --driver: another checkout, run alternately")
    args = ap.parse_args()
    throughput([int(n) for n in args.ranks.split(",")])
    if args.driver:
        trees = {"this checkout": HERE, **({args.against: args.against} if args.against else {})}
        driver_cpu(trees, args.driver)


if __name__ == "__main__":
    main()
