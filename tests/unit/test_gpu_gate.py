"""The GPU tests' GPU/CPU-form/fail decision (tests/gpu/gate.py) on injected facts, and once through
pytest on this CPU machine with a stand-in nvidia-smi on PATH (a GPU torch cannot use: errors)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu.gate import Facts, Gate, decide, intra_group_sizes

ROOT = Path(__file__).resolve().parents[2]
H100 = "NVIDIA H100 80GB HBM3, 81559, 9.0, 535.104.05\n"
OLD_DRIVER = ("The NVIDIA driver on your system is too old (found version 12020). Please update your GPU driver by "
              "downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx")


def _facts(**kw) -> Facts:
    base = {"smi_output": H100 * 8, "torch_version": "2.13.0", "torch_cuda": "13.0"}
    return Facts(**{**base, **kw})


def test_torch_using_the_gpus_runs():
    assert decide(_facts(cuda_available=True, torch_gpus=8)) == (
        Gate.RUN, "torch 2.13.0 (CUDA 13.0) uses 8 GPU(s) (8 x NVIDIA H100 80GB HBM3, driver 535.104.05)")
    # a container without nvidia-smi, where torch still sees its GPU
    assert decide(_facts(smi_output=None, cuda_available=True, torch_gpus=1))[0] is Gate.RUN


def test_no_gpu_at_all_runs_the_cpu_form_unless_a_gpu_is_required():
    none = _facts(smi_output=None, torch_cuda=None, torch_version="2.13.0+cpu")
    assert decide(none) == (Gate.CPU, "no NVIDIA GPU on this machine (nvidia-smi is not installed; no /dev/nvidiaN): "
                                      "the CPU form runs (gloo on CPU ranks)")
    gate, reason = decide(Facts(**{**none.__dict__, "require_gpu": True}))
    assert gate is Gate.FAIL and reason.endswith("COLLBENCH_REQUIRE_GPU=1: the GPU check has nothing to measure")
    empty = _facts(smi_output="", smi_error="exit 6: No devices were found")
    assert decide(empty) == (Gate.CPU, ("no NVIDIA GPU on this machine (nvidia-smi: exit 6: No devices were found; "
                                        "no /dev/nvidiaN): the CPU form runs (gloo on CPU ranks)"))
    # nvidia-smi installed without a driver, and no device file: no GPU was given to this machine
    no_driver = _facts(smi_output="", smi_error="exit 9: NVIDIA-SMI has failed because it couldn't communicate "
                                                "with the NVIDIA driver.")
    assert decide(no_driver)[0] is Gate.CPU


def test_a_driver_too_old_for_torchs_cuda_fails_with_both_versions():
    gate, reason = decide(_facts(torch_error=OLD_DRIVER))
    assert gate is Gate.FAIL
    assert reason == ("nvidia-smi lists 8 x NVIDIA H100 80GB HBM3 (driver 535.104.05) but torch 2.13.0 cannot use "
                      "CUDA: this machine has NVIDIA driver 535.104.05; torch 2.13.0 is built for CUDA 13.0, which "
                      "needs driver 580.65.06 or newer (CUDA 13.x): upgrade the driver or install a torch built for "
                      "the driver's CUDA (docs/deploy/cloud.md, GPU driver)")


def test_other_reasons_torch_cannot_use_a_present_gpu():
    cpu_build = decide(_facts(smi_output=H100, torch_cuda=None, torch_version="2.13.0+cpu",
                              torch_error="Torch not compiled with CUDA enabled"))
    assert cpu_build == (Gate.FAIL, ("nvidia-smi lists 1 x NVIDIA H100 80GB HBM3 (driver 535.104.05) but torch "
                                     "2.13.0+cpu cannot use CUDA: it is a CPU-only build (torch.version.cuda is None): "
                                     "install a torch built for CUDA"))
    for hidden in ("", "-1", "NoDevFiles"):
        gate, reason = decide(_facts(visible_devices=hidden, torch_error="No CUDA GPUs are available"))
        assert gate is Gate.FAIL and reason.endswith(f"CUDA_VISIBLE_DEVICES={hidden!r} hides every GPU")
    new_driver = H100.replace("535.104.05", "580.95.05")
    gate, reason = decide(_facts(smi_output=new_driver, visible_devices="0,1",
                                 torch_error="CUDA unknown error - this may be due to an incorrectly set up environment"))
    assert gate is Gate.FAIL and reason.endswith(
        "this machine has 1 GPUs but torch cannot use them (CUDA unknown error - this may be due to an incorrectly "
        "set up environment)")
    # the kernel driver made /dev/nvidia0 but nvidia-smi fails: a GPU is there, so this fails
    gate, reason = decide(_facts(smi_output="", smi_error="exit 9: NVIDIA-SMI has failed", device_files=1,
                                 torch_error="CUDA driver initialization failed"))
    assert gate is Gate.FAIL and reason.startswith(
        "/dev has 1 NVIDIA device(s) but nvidia-smi failed: exit 9: NVIDIA-SMI has failed but torch 2.13.0 cannot "
        "use CUDA: ")


def test_intra_group_sizes_by_gpu_count():
    assert [intra_group_sizes(n) for n in (1, 2, 3, 4, 6, 8)] == [[1], [2], [2, 3], [2, 4], [2, 4, 6], [2, 4, 8]]


@pytest.mark.skipif(os.path.exists("/dev/nvidia0"), reason="a machine with a GPU runs tests/gpu for real")
def test_tests_gpu_fail_where_nvidia_smi_sees_a_gpu_that_torch_cannot_use(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("torch uses a GPU here")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text(f"#!/bin/sh\nprintf '{H100.strip()}\\n'\n")
    (fake / "nvidia-smi").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("COLLBENCH_REQUIRE_GPU", "CUDA_VISIBLE_DEVICES")}
    env["PATH"] = os.pathsep.join([str(fake), env.get("PATH", "")])
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/gpu"], cwd=ROOT,
                          capture_output=True, text=True, timeout=240, env=env, check=False)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "skipped" not in proc.stdout and " error" in proc.stdout
    assert "nvidia-smi lists 1 x NVIDIA H100 80GB HBM3 (driver 535.104.05) but torch" in proc.stdout
