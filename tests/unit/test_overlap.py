"""The overlap workload's matmul sizing, on a device of known speed: `_time_matmul` stands in for
a device whose matmul of side d takes exactly 2 d^3 / rate (plus a fixed launch cost, which the
probe at a compute-bound size hardly sees), so the chosen (side, repetitions) can be checked
exactly. How close a real CPU comes is a benchmark (benchmarks/overlap_sizing.py prints it), not a
test: on a shared 2-core machine it varied 0.4-2.5x."""

import pytest
import torch

from workloads import overlap
from workloads.overlap import _matmul_size

RATE_FLOPS_PER_US = 2e4  # 20 GFLOP/s
LAUNCH_US = 5.0


def _device_of_known_speed(dim: int, device: torch.device, reps: int = 3) -> float:
    return LAUNCH_US + 2 * dim**3 / RATE_FLOPS_PER_US


@pytest.mark.parametrize("target_us", [5_000.0, 40_000.0, 400.0])
def test_overlap_sizes_its_matmul_to_the_target_time(monkeypatch, target_us):
    monkeypatch.setattr(overlap, "_time_matmul", _device_of_known_speed)
    cpu = torch.device("cpu")
    dim, reps = _matmul_size(0.0, target_us, cpu)
    took = reps * _device_of_known_speed(dim, cpu)
    assert 0.9 * target_us <= took <= 1.1 * target_us, (target_us, dim, reps, took)


def test_the_requested_flops_are_that_matmul():
    cpu = torch.device("cpu")
    assert _matmul_size(2 * 512.0**3, 1.0, cpu) == (512, 1)  # --compute-flops: exactly that matmul
    assert _matmul_size(2 * 4096.0**3, 1.0, cpu) == (2048, 8)  # above the largest side: repeated
