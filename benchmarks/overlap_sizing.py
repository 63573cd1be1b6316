"""How close the overlap workload's matmul comes to the time it is sized for, on this machine's CPU
(workloads/overlap.py: a compute-bound probe, then one correction). Prints the ratio of the
measured time to the target, best of three, per target.

    python benchmarks/overlap_sizing.py [--targets 5000,40000]
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from workloads.overlap import _matmul_size, _time_matmul  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--targets", default="5000,40000", help="target times in microseconds, comma-separated")
    args = p.parse_args()
    cpu = torch.device("cpu")
    for target_us in map(float, args.targets.split(",")):
        dim, reps = _matmul_size(0.0, target_us, cpu)
        took = min(_time_matmul(dim, cpu) for _ in range(3)) * reps
        print(f"target {target_us:.0f} us: side {dim} x {reps}: {took:.0f} us ({took / target_us:.2f}x)")


if __name__ == "__main__":
    main()
