"""Device masks before the first 8-GPU node (issue 56), on the CPU: a worker refuses to set its
mask once CUDA is initialised in its process (torch's own flag, planted here), and two MIG devices
on a node are refused in one line naming the node, where CUDA would show every actor but one no
device."""

from __future__ import annotations

import os

import pytest

from orchestrator.execution.pool import gpu_assignment
from workloads.worker import BenchWorker


def test_the_mask_is_refused_once_cuda_is_initialised(monkeypatch):
    import torch

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    worker = BenchWorker("127.0.0.1")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(RuntimeError, match=r"CUDA was initialised in this worker \(pid \d+\) before its mask "
                                           r"CUDA_VISIBLE_DEVICES=3,5 was set"):
        worker.use_gpu("3,5", 1)
    assert "CUDA_VISIBLE_DEVICES" not in os.environ and worker._gpu is None  # nothing half-set


def test_two_mig_devices_are_refused_and_one_is_used():
    mig = ["MIG-6a2f1c4e-0b7d-5e8a-9c3b-1d2e3f4a5b6c", "MIG-0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"]
    with pytest.raises(ValueError, match=r"^2 workers were given MIG devices \(MIG-0f1e2d3c-.*, \.\.\.\): CUDA shows "
                                         r"a process one MIG device of a list"):
        gpu_assignment(mig)
    assert gpu_assignment(mig[:1]) == (mig[0], [0])  # one MIG device per node: CUDA shows it
    assert gpu_assignment(["3", "1", "10", "2"]) == ("1,2,3,10", [2, 0, 3, 1])  # whole GPUs, as before
