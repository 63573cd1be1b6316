"""Device masks before the first 8-GPU node (issue 56), on the CPU: a worker refuses to set its
mask once CUDA is initialised in its process (torch's own flag, planted here), and two MIG devices
on a node are refused in one line naming the node, where CUDA would show every actor but one no
device."""

from __future__ import annotations

import os
import tempfile

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


def test_gpu_uuids_are_ordered_by_pci_bus_as_nvidia_smi_numbers_them():
    """Ray gives GPU UUIDs where the raylet's CUDA_VISIBLE_DEVICES lists them; CUDA numbers a mask
    in its own order, so the union is ordered by the bus each worker read from the driver's /proc
    (two real information files: tests/fixtures/proc_nvidia_gpus/SOURCE.md), not as strings."""
    from workloads.gpus import bus_of_uuids

    root = os.path.join(os.path.dirname(__file__), "..", "fixtures", "proc_nvidia_gpus")
    h100, gtx = "GPU-9221d5d1-b60b-a624-bf14-0a1819cfda3b", "GPU-e3f822b9-8c5f-95a5-b379-8dfdeefd7758"
    buses = bus_of_uuids(root)
    assert buses == {h100: "0000:62:00.0", gtx: "0000:04:00.0"}
    assert sorted([h100, gtx]) == [h100, gtx]  # as strings the H100 would be cuda:0
    assert gpu_assignment([h100, gtx], [buses[h100], buses[gtx]]) == (f"{gtx},{h100}", [1, 0])
    assert gpu_assignment([h100, gtx]) == (f"{h100},{gtx}", [0, 1])  # no bus read: as before
    assert bus_of_uuids(os.path.join(root, "absent")) == {}  # no NVIDIA driver: nothing, no error


def test_a_gpu_worker_asks_torch_to_raise_on_a_failed_collective_rather_than_end_the_process(monkeypatch, tmp_path):
    """torch's default NCCL error handling (3) tears the process down, so a killed rank's healthy
    peers die too and the driver, which blames the ranks whose process died, would blame them; a
    GPU worker asks for 2 (abort its communicators, raise), as gloo's peers raise; --env keeps a
    user's own value."""
    from workloads.worker import ABORT_AND_RAISE

    monkeypatch.setattr(BenchWorker, "describe", lambda self: None)  # Ray's view of the worker: not here
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its NCCL debug files' folder, swept at start
    for name in ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS"):  # use_gpu sets them for the worker's NCCL
        monkeypatch.setenv(name, "WARN" if name == "NCCL_DEBUG" else "INIT")
    for given, kept in ((None, ABORT_AND_RAISE), ("3", "3")):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
        monkeypatch.setenv("NCCL_DEBUG_FILE", "/tmp/collbench-test-nccl.%p.log")
        if given is None:
            monkeypatch.delenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", raising=False)
        else:
            monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", given)
        BenchWorker("127.0.0.1").use_gpu("0", 0)
        assert os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == kept  # read by every process group made after
    assert ABORT_AND_RAISE == "2"


_WORKER = """
import os, sys
import torch
from workloads.worker import BenchWorker
BenchWorker.describe = lambda self: None  # Ray's view of the worker: not here
worker = BenchWorker("127.0.0.1")
if sys.argv[1] == "plant":
    torch.cuda.device_count()  # what a careless change could call before the mask: CUDA reads it there
worker.use_gpu("2,5", 1)
"""


def test_the_call_order_record_catches_a_cuda_touch_before_the_mask(tmp_path):
    """A worker process under the record (workloads.cuda_order, as the fake-GPU cluster runs it):
    the product's own order passes (its first CUDA touch, is_available, comes after the mask); a
    touch planted before the mask is named with its process."""
    import subprocess
    import sys

    from workloads import cuda_order

    for plant in ("none", "plant"):
        record = tmp_path / f"{plant}.txt"
        env = {**os.environ, cuda_order.ENV: str(record), "NCCL_DEBUG_FILE": str(tmp_path / "nccl.%p.log")}
        env.pop("CUDA_VISIBLE_DEVICES", None)
        proc = subprocess.run([sys.executable, "-c", _WORKER, plant], env=env, capture_output=True, text=True,
                              timeout=120, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
        assert proc.returncode == 0, proc.stderr[-2000:]
        lines = record.read_text().splitlines()
        pid = lines[-1].split()[0]
        assert lines[-1] == f"{pid} is_available masked"  # the worker's own touch, after its mask
        found = cuda_order.touched_before_mask(str(record))
        assert found == ([] if plant == "none" else [f"{pid} device_count"]), lines
