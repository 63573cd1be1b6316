"""scripts/bundle_plan.py (what the offline bundle carries and installs) and scripts/gpu_check.py's
sweep sizes: wheel tags against a named target, the image's large wheels left out, pip's plan
turned into the wheels to install beside the image, a replacement of the image's torch refused."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


bundle_plan = _load("bundle_plan")
PY312, GLIBC = (3, 12), (2, 35)


@pytest.mark.parametrize(("wheel", "ok"), [
    ("ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl", True),
    ("ray-2.60.0-cp311-cp311-manylinux2014_x86_64.whl", False),  # another CPython
    ("protobuf-7.36.2-cp310-abi3-manylinux2014_x86_64.whl", True),  # the stable ABI from 3.10 on
    ("protobuf-7.36.2-cp313-abi3-manylinux2014_x86_64.whl", False),  # stable ABI of a newer CPython
    ("click-8.5.1-py3-none-any.whl", True),
    ("tzdata-2026.6-py2.py3-none-any.whl", True),
    ("msgpack-1.2.4-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl", True),
    ("numpy-2.5.5-cp312-cp312-manylinux_2_36_x86_64.whl", False),  # needs a newer glibc than 2.35
    ("numpy-2.5.5-cp312-cp312-macosx_14_0_arm64.whl", False),
    ("numpy-2.5.5-cp312-cp312-manylinux_2_28_aarch64.whl", False),
])
def test_wheel_tags_against_the_target(wheel, ok):
    assert bundle_plan.installable(wheel, PY312, GLIBC) is ok


def test_the_image_large_wheels_are_left_out_small_ones_kept(tmp_path):
    (tmp_path / "numpy-2.5.5-cp312-cp312-manylinux_2_28_x86_64.whl").write_bytes(bytes(2 << 20))
    (tmp_path / "PyYAML-6.0.4-cp312-cp312-manylinux2014_x86_64.whl").write_bytes(bytes(800 << 10))
    (tmp_path / "ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl").write_bytes(bytes(3 << 20))
    image = tmp_path / "image.txt"
    image.write_text("# the image\nnumpy==2.5.2\npyyaml\ntorch\n")
    assert bundle_plan.image_names(image) == {"numpy", "pyyaml", "torch"}
    assert [w.name for w in bundle_plan.to_omit(tmp_path, {"numpy", "pyyaml", "torch"})] == \
        ["numpy-2.5.5-cp312-cp312-manylinux_2_28_x86_64.whl"]  # PyYAML: small, kept as a fallback


def _item(name: str, version: str) -> dict:
    return {"metadata": {"name": name, "version": version},
            "download_info": {"url": f"file:///tmp/w/{name}-{version}-py3-none-any.whl"}}


def test_the_install_plan_adds_beside_the_image_and_never_replaces_its_torch():
    report = {"install": [_item("ray", "2.60.0"), _item("jsonschema", "4.26.0"), _item("packaging", "26.4")]}
    wheels, refusals, notes = bundle_plan.install_plan(report, {"torch": "2.11.0", "packaging": "21.0"})
    assert wheels == ["/tmp/w/ray-2.60.0-py3-none-any.whl", "/tmp/w/jsonschema-4.26.0-py3-none-any.whl",
                      "/tmp/w/packaging-26.4-py3-none-any.whl"]
    assert refusals == [] and notes == ["the bundle's packaging 26.4 goes before the image's 21.0 (its version does "
                                        "not satisfy what the bundle needs)"]
    report["install"].append(_item("Torch", "2.13.0"))
    wheels, refusals, _ = bundle_plan.install_plan(report, {"torch": "2.11.0"})
    assert "/tmp/w/Torch-2.13.0-py3-none-any.whl" not in wheels
    assert refusals == ["the bundle's torch 2.13.0 would replace the image's torch 2.11.0: build the bundle with the "
                        "image's versions (docs/GPU.md)"]
    # an image without numpy (the rehearsal's): the bundle's numpy is simply installed
    assert bundle_plan.install_plan({"install": [_item("numpy", "2.5.5")]}, {"torch": "2.13.0"})[1] == []


def test_bad_arguments_exit_2_with_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        bundle_plan.main(["tags", "/nowhere", "3.x", "2.35"])
    assert e.value.code == 2
    assert capsys.readouterr().err == "bundle_plan: error: Python '3.x' is not MAJOR.MINOR\n"
    assert bundle_plan.main(["omit"]) == 2


def test_the_gpu_sweep_reaches_the_size_the_nvlink_floor_is_judged_at():
    """-b 1K -e 256M -f 16 stopped at 64M (1K, 16K, 256K, 4M, 64M), so the 8-GPU floor (rows of
    256M or more) was never applied; the check's sizes must reach it."""
    from orchestrator.sweep.sizes import parse_bytes, sweep

    gpu_check, gpu_verdict = _load("gpu_check"), _load("gpu_verdict")
    args = dict(zip(gpu_check.GPU_SIZES[::2], gpu_check.GPU_SIZES[1::2]))
    sizes = sweep(parse_bytes(args["-b"]), parse_bytes(args["-e"]), int(args["-f"]))
    assert sizes == [1 << 10, 64 << 10, 4 << 20, 256 << 20]
    assert max(sizes) >= gpu_verdict.MIN_BYTES and max(sizes) >= gpu_verdict.COPY_FROM_BYTES
    assert sweep(parse_bytes("1K"), parse_bytes("256M"), 16)[-1] == 64 << 20  # the old choice fell short
