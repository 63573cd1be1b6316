"""The driver check before any actor starts, on injected probe facts (what nvidia-smi and torch
report on a node), and the probe's reading of torch's report."""

import json

import pytest

from orchestrator.errors import UsageError
from orchestrator.execution.probe import parse_nvidia_smi, with_torch
from orchestrator.sweep.devices import CUDA_DRIVER_FLOOR, check_driver, driver_problem, parse_version
from orchestrator.sweep.inventory import from_description

INV = from_description("2x8")
IDS = [n.node_id for n in INV.nodes]
# recorded `nvidia-smi --query-gpu=name,memory.total,compute_cap,driver_version` of an 8 x H100 node
SMI_550 = "\n".join(["NVIDIA H100 80GB HBM3, 81559, 9.0, 550.54.15"] * 8) + "\n"
SMI_580 = SMI_550.replace("550.54.15", "580.82.07")


def report(torch="2.13.0+cu130", cuda="13.0", gpus=8, error=None, nccl=(2, 29, 7)) -> str:
    """What the probe's torch subprocess prints on a node (warnings before the JSON line)."""
    line = json.dumps({"torch": torch, "cuda": cuda, "gpus": gpus, "error": error, "nccl": list(nccl) if nccl else None})
    return "UserWarning: something torch said\n" + line + "\n"


def node_caps(smi: str, torch_report: str):
    return with_torch(parse_nvidia_smi(smi), torch_report)


def test_floor_table_is_nvidias():
    # NVIDIA's minor-version-compatibility minimums: 13.x >= 580, 12.x >= 525, 11.x >= 450
    assert {major: parse_version(floor)[0] for major, floor in CUDA_DRIVER_FLOOR.items()} == {11: 450, 12: 525, 13: 580}
    assert parse_version("550.54.15") == (550, 54, 15) and parse_version("13.0") == (13, 0)
    assert parse_version("570.26") < parse_version(CUDA_DRIVER_FLOOR[13]) <= parse_version("580.82.07")


def test_cuda13_torch_on_a_550_driver_is_refused_naming_node_driver_and_minimum():
    caps = {IDS[0]: node_caps(SMI_580, report()), IDS[1]: node_caps(SMI_550, report())}
    assert caps[IDS[1]].torch_cuda == (13, 0) and caps[IDS[1]].nccl_version == (2, 29, 7)
    with pytest.raises(UsageError) as e:
        check_driver("nccl", INV, caps)
    msg = str(e.value)
    assert msg.startswith(f"node {INV.nodes[1].ip} has NVIDIA driver 550.54.15; torch 2.13.0+cu130 is built for "
                          "CUDA 13.0, which needs driver 580.65.06 or newer")
    assert "\n" not in msg
    check_driver("gloo", INV, caps)  # gloo needs no CUDA: not refused


def test_cuda12_torch_runs_on_the_same_driver():
    cu128 = report(torch="2.9.1+cu128", cuda="12.8", nccl=(2, 27, 5))
    check_driver("nccl", INV, dict.fromkeys(IDS, node_caps(SMI_550, cu128)))  # 550 >= 525: minor-version compatible
    old = SMI_550.replace("550.54.15", "470.256.02")
    with pytest.raises(UsageError, match=r"has NVIDIA driver 470\.256\.02; torch 2\.9\.1\+cu128 is built for CUDA "
                                         r"12\.8, which needs driver 525\.60\.13 or newer \(CUDA 12\.x\)"):
        check_driver("nccl", INV, dict.fromkeys(IDS, node_caps(old, cu128)))


def test_torchs_own_error_names_the_cuda_the_driver_supports_when_nvidia_smi_cannot():
    too_old = ("The NVIDIA driver on your system is too old (found version 12020). Please update your GPU driver "
               "by downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx")
    caps = with_torch(parse_nvidia_smi("garbage"), report(gpus=None, error=too_old))
    assert driver_problem(caps, 8).startswith("has an NVIDIA driver for CUDA 12.2; torch 2.13.0+cu130 is built for "
                                              "CUDA 13.0, which needs driver 580.65.06 or newer")


def test_torch_that_cannot_see_the_gpus_is_refused_with_its_reason():
    no_driver = node_caps(SMI_580, report(gpus=None, error="Found no NVIDIA driver on your system."))
    assert driver_problem(no_driver, 8) == "has 8 GPUs but torch cannot use them (Found no NVIDIA driver on your system.)"
    cpu_build = node_caps(SMI_580, report(torch="2.13.0+cpu", cuda=None, gpus=0, nccl=None))
    assert driver_problem(cpu_build, 8) == "has 8 GPUs but torch 2.13.0+cpu is a CPU-only build"
    fewer = node_caps(SMI_580, report(gpus=4))
    assert driver_problem(fewer, 8) == "has 8 GPUs (Ray's count) but torch 2.13.0+cu130 sees 4"
    assert driver_problem(fewer, 4) is None  # Ray was told 4 (ray start --num-gpus 4): what torch sees is enough
    broken = with_torch(parse_nvidia_smi(SMI_580), "Traceback ...\nImportError: libcudnn.so.9\n")
    assert driver_problem(broken, 8).startswith("has 8 GPUs but torch cannot use them (unreadable torch probe output")
    assert driver_problem(node_caps(SMI_580, report()), 8) is None


def test_the_probes_torch_subprocess_reports_this_machines_torch():
    """The real subprocess on this (GPU-less) machine: a CPU build of torch, or one that sees no GPU."""
    import torch

    from orchestrator.execution.probe import _ask_torch

    caps = with_torch(parse_nvidia_smi(SMI_580), _ask_torch())
    assert caps.torch_version == torch.__version__
    assert caps.torch_cuda == (parse_version(torch.version.cuda)[:2] if torch.version.cuda else None)
    assert driver_problem(caps, 8) is not None  # no GPU here: this node could never run NCCL
    assert caps.nccl_loaded is None  # a CPU torch loads no libnccl


def test_the_libnccl_torch_loads_is_read_beside_the_one_it_was_built_with():
    """torch.cuda.nccl.version() is the headers torch was built with (torch/csrc/cuda/nccl.cpp:
    NCCL_MAJOR/MINOR/PATCH at compile time); the probe also asks the libnccl the process loaded
    (ncclGetVersion), which an older library first on the path can make another."""
    from orchestrator.execution.probe import nccl_version_code

    assert nccl_version_code(22809) == (2, 28, 9) and nccl_version_code(2708) == (2, 7, 8)
    line = json.dumps({"torch": "2.11.0+cu130", "cuda": "13.0", "gpus": 8, "error": None, "nccl": [2, 28, 9],
                       "nccl_loaded": 22105})
    caps = node_caps(SMI_580, line + "\n")
    assert (caps.nccl_version, caps.nccl_loaded) == ((2, 28, 9), (2, 21, 5))
    assert node_caps(SMI_580, report()).nccl_loaded is None  # not read (a static build): the built one stands
