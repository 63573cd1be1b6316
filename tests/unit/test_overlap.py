"""The overlap workload's matmul sizing, on this CPU."""

import torch

from workloads.overlap import _matmul_size, _time_matmul


def test_overlap_sizes_its_matmul_to_the_target_time():
    """The matmul is sized from a compute-bound probe, then corrected: on this CPU it takes about
    the time asked for (wide bounds: a shared 2-core machine)."""
    cpu = torch.device("cpu")
    for target_us in (5_000.0, 40_000.0):
        dim, reps = _matmul_size(0.0, target_us, cpu)
        took = min(_time_matmul(dim, cpu) for _ in range(3)) * reps
        assert 0.4 * target_us <= took <= 2.5 * target_us, (target_us, dim, reps, took)
    assert _matmul_size(2 * 512.0**3, 1.0, cpu) == (512, 1)  # --compute-flops: exactly that matmul
    assert _matmul_size(2 * 4096.0**3, 1.0, cpu) == (2048, 8)  # above the largest side: repeated
