"""The GPU check rehearsed on the GPU machine's own install path, here, offline (issues 30, 41).

The bundle is the one the prepared call carries: built here for Python 3.12 with the image's large
packages left out (`offline_bundle.sh DIR --python 3.12 --image scripts/images/nvidia-h200.txt`),
every wheel's tags checked against that target. The "image" is a Python 3.12 virtual environment
(the GPU machine's is /opt/torch/.venv, Python 3.12.3; here pyenv's 3.12) holding the image's
packages at the versions scripts/images/nvidia-h200.txt pins (read off the GPU machine; torch
2.11.0 is the CUDA build, which runs on the CPU here), its `python3` first on PATH. The tree is
copied as the device tool copies it (tracked and untracked-not-ignored files); then
`scripts/gpu_check.sh --bundle DIR --rehearse` runs inside a network namespace that has only
loopback: the bundle checked against the tree, unpacked by Python (no `xz`), resolved by the
image's pip against the image's packages and installed beside them, Ray, collbench and torch
imported from there, one Ray head, doctor, a gloo sweep of every collective and dtype, tests/gpu
in their CPU form on that sweep's rows, overlap, replay, the report and the verdict, which names
every GPU-only check as not run. Each step's time is printed (run with -s), and so is the carried
size (tree + bundle), held within the device tool's 64 MiB.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import secrets
import shutil
import signal
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from orchestrator.lab import cluster as labmod
from orchestrator.lab import raynodes

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
IMAGE_FILE = REPO / "scripts/images/nvidia-h200.txt"
CARRY_LIMIT_BYTES = 64 << 20  # the device tool: tree + carried paths
STEPS_RUN = ("install", "facts", "ray", "doctor", "sweep", "tests/gpu", "overlap", "replay", "report", "verdict")


def _run(cmd: list[str], timeout_s: float, netns: str | None = None, **kwargs) -> subprocess.CompletedProcess:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    return subprocess.run(prefix + cmd, check=False, capture_output=True, text=True, timeout=timeout_s, **kwargs)


def _copy_tree(dest: Path) -> int:
    """The files the device tool sends (tracked, and untracked that git does not ignore); their bytes."""
    listed = _run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"], 60)
    assert listed.returncode == 0, listed.stderr
    total = 0
    for name in filter(None, listed.stdout.split("\0")):
        src = REPO / name
        if not src.is_file():
            continue  # deleted from the work tree
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / name)
        total += src.stat().st_size
    return total


def _bundle_plan():
    spec = importlib.util.spec_from_file_location("bundle_plan", REPO / "scripts/bundle_plan.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _python_312() -> str:
    """A CPython 3.12 here (pyenv's), as the GPU machine's is 3.12."""
    for candidate in [*sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12"))),
                      shutil.which("python3.12") or ""]:
        check = [candidate, "-c", "import sys; assert sys.version_info[:2] == (3, 12)"]
        if candidate and _run(check, 60).returncode == 0:
            return candidate
    pytest.fail("no CPython 3.12 on this machine (the GPU machine's Python): install one (pyenv install 3.12)")


def _image_requirements() -> list[str]:
    """The image's packages as scripts/images/nvidia-h200.txt lists them, pins kept."""
    lines = [ln.split("#", 1)[0].strip() for ln in IMAGE_FILE.read_text().splitlines()]
    return [ln for ln in lines if ln]


def test_the_gpu_check_rehearsed_offline_on_the_gpu_machines_python_and_packages(tmp_path: Path) -> None:
    from tests.lab.conftest import require_lab

    require_lab()
    bundle_plan = _bundle_plan()
    tree, image, bundle, evidence = (tmp_path / d for d in ("tree", "image", "bundle", "evidence"))
    tree.mkdir()
    tree_bytes = _copy_tree(tree)

    # The image (Python 3.12 with the image's packages at their pinned versions, nothing of collbench's)
    # is installed beside the bundle's build: one unpacks wheels from this disk, the other downloads,
    # strips and compresses, each on a core of its own.
    start_s = time.monotonic()
    assert _run([_python_312(), "-m", "venv", str(image)], 120).returncode == 0
    pip = [str(image / "bin/python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    installing = subprocess.Popen([*pip, *_image_requirements()], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)

    # The bundle of the prepared call, built here from the copied tree (as --prepare builds it).
    try:
        build = _run(["bash", str(tree / "scripts/offline_bundle.sh"), str(bundle), "--python", "3.12", "--image",
                      str(tree / "scripts/images/nvidia-h200.txt")], 900)
        print(f"\n{build.stdout.splitlines()[-1] if build.stdout else ''} ({time.monotonic() - start_s:.0f} s)")
        _, installed_err = installing.communicate(timeout=1200)
    finally:
        if installing.poll() is None:  # this test's own pip, by its handle
            installing.kill()
            installing.wait()
    assert installing.returncode == 0, installed_err[-3000:]
    print(f"image: Python 3.12 with {len(_image_requirements())} packages, beside the bundle, in "
          f"{time.monotonic() - start_s:.0f} s")
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-3000:]
    assert re.search(r"left out pyarrow-\S+\.whl \(\d+ MiB\): the image has it", build.stdout)
    archive = bundle / "collbench-offline-py312.tar.xz"
    with tarfile.open(archive) as packed:
        wheels = [Path(n).name for n in packed.getnames() if n.endswith(".whl")]
        target = packed.extractfile("./target.txt").read().decode()
    assert [w for w in wheels if not bundle_plan.installable(w, (3, 12), (2, 35))] == []
    dists = {bundle_plan.wheel_tags(w)[0] for w in wheels}
    assert {"ray", "collbench", "jsonschema"} <= dists and not dists & {"torch", "numpy", "pandas", "pyarrow"}
    assert target.splitlines()[:2] == ["python 3.12", "glibc 2.35"]
    assert archive.stat().st_size < 32 << 20
    carry_bytes = tree_bytes + sum(p.stat().st_size for p in bundle.iterdir())
    print(f"carried: tree {tree_bytes / 2**20:.1f} MiB + bundle {(carry_bytes - tree_bytes) / 2**20:.1f} MiB = "
          f"{carry_bytes / 2**20:.1f} MiB (limit {CARRY_LIMIT_BYTES >> 20})")
    assert carry_bytes <= CARRY_LIMIT_BYTES

    missing = _run([str(image / "bin/python"), "-c", "import ray"], 60)
    assert missing.returncode == 1 and "No module named 'ray'" in missing.stderr
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "VIRTUAL_ENV", "OUT") and not k.startswith(("PYTHON", "COLLBENCH_"))}
    # the GPU machine's description lists no `xz`: one that fails stands first on PATH (the bundle is
    # unpacked by Python's tarfile)
    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / "xz").write_text("#!/bin/sh\necho 'xz: not on the GPU machine' >&2\nexit 127\n")
    (stub / "xz").chmod(0o755)
    env["PATH"] = f"{stub}:{image / 'bin'}:{env.get('PATH', '')}"
    env["RAY_memory_monitor_refresh_ms"] = "0"  # as the prepared call sets it
    pins = dict(re.split(r"==", r, maxsplit=1) for r in _image_requirements() if "==" in r)

    ns = "cbgpu" + secrets.token_hex(2)
    subprocess.run(["ip", "netns", "add", ns], check=True, timeout=30)
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True, timeout=30)
        probe = _run([str(image / "bin/python"), "-c",
                      "import socket; socket.create_connection(('pypi.org', 443), timeout=5)"], 30, ns)
        assert probe.returncode != 0 and re.search(r"gaierror|unreachable|Temporary failure", probe.stderr), probe
        # a tree changed after the bundle was built: refused at once, nothing installed
        stale = tree / "workloads" / "stale_probe.py"
        stale.write_text("# written after the bundle\n")
        refused = _run(["bash", "scripts/gpu_check.sh", "--bundle", str(bundle), "--rehearse", "--evidence",
                        str(evidence)], 60, ns, cwd=tree, env=env)
        stale.unlink()
        assert refused.returncode == 2 and "new workloads/stale_probe.py" in refused.stderr, refused.stderr
        assert not evidence.exists()
        start_s = time.monotonic()
        check = _run(["bash", "scripts/gpu_check.sh", "--bundle", str(bundle), "--rehearse", "--evidence",
                      str(evidence)], 660, ns, cwd=tree, env=env)
        print(f"gpu_check.sh --rehearse: {time.monotonic() - start_s:.0f} s")
    finally:
        raynodes.kill_pids(labmod.netns_pids(ns), signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", ns], check=False, timeout=30)
    out = check.stdout + check.stderr
    print("\n".join(line for line in out.splitlines() if line.startswith("[gpu_check]")))
    assert check.returncode == 0, out[-6000:]

    for step in STEPS_RUN:
        assert re.search(rf"^\[gpu_check\] step {re.escape(step)}: ok in \d+\.\d s", out, re.M), (step, out[-4000:])
    # every GPU-only step named as not run, with its reason
    assert "[gpu_check] step nvidia-smi: not run in 0.0 s: no GPU (no nvidia-smi on PATH)" in out
    assert "[gpu_check] step cuda-graph: not run in 0.0 s: no GPU" in out
    # tests/gpu ran their CPU form on the sweep's rows: passed, the device peak alone skipped, named
    assert re.search(r"^\[gpu_check\] step tests/gpu: ok in [\d.]+ s: \d+ passed, 1 skipped$", out, re.M), out[-4000:]
    assert "CPU form (no NVIDIA GPU here): torch keeps no allocator peak" in out
    # installed beside the image's python: its own torch, nothing of it replaced, Ray from the bundle
    installed = re.search(r"installed from the bundle into (\S+): collbench \S+, ray 2\.\d+\.\d+, (\d+) wheel\(s\) "
                          r"beside the image's \(([^)]*)\) \| torch (\S+) from (\S+)", out)
    assert installed, out[-4000:]
    assert installed.group(4).split("+")[0] == pins["torch"] and installed.group(5).startswith(str(image))
    # Ray and what it needs that the image lacks: the five the H200 installed (its pip list holds
    # these at the bundle's versions: tests/fixtures/gpu/h200_20261204/pip-list.txt), nothing of the image's
    beside = set(installed.group(3).split(", "))
    assert beside == {"ray", "jsonschema", "jsonschema-specifications", "referencing", "rpds-py"}, beside
    assert int(installed.group(2)) == len(beside)
    assert re.search(r"python3?: torch 2\.11\.0\+cu130, CUDA 13\.0, no NCCL \(no GPU\), 0 GPU\(s\)", out), out[-4000:]
    # the verdict: PASS on what a CPU can show, every GPU-only check named as not run
    assert "collbench GPU check: PASS | 2 CPU ranks (rehearsal, no GPU) | 8 collectives x " in out
    assert len(re.findall(r"^\s+not run \(no GPU\): ", out, re.M)) == 7
    assert "[gpu_check] every step that ran passed" in out
    assert {p.name for p in evidence.iterdir()} == {"gpu_check.log", "doctor.json", "report.json", "results.tar.gz"}
    with tarfile.open(evidence / "results.tar.gz") as packed:
        names = packed.getnames()
        listed = packed.extractfile("pip-list.txt").read().decode()
    assert any(n.startswith("results/sweep/") and n.endswith(".parquet") for n in names)
    assert any(n.startswith("ray-logs/") for n in names)
    assert f"numpy=={pins['numpy']}" in listed and "ray==" in listed
