"""The GPU check rehearsed on the GPU machine's layout, here, offline (issue 30): the image is a
virtual environment holding torch and nothing else collbench needs, its `python3` first on PATH;
the bundle is built for that interpreter by that interpreter (a fresh venv: an old setuptools, no
`wheel`); the tree is copied as the device tool copies it (tracked and untracked-not-ignored files);
then `scripts/gpu_check.sh --bundle DIR --rehearse` runs inside a network namespace that has only
loopback: install beside the image's own Python, one Ray head, doctor, a gloo sweep of every
collective and dtype, tests/gpu (skipped: no GPU), overlap, replay, the report and the verdict,
which names every GPU-only check as not run. Each step's time is printed (run with -s), and so is
the carried size (tree + bundle), held within the device tool's 64 MiB.

A second test builds the bundle for the GPU machine itself (Python 3.12, its image's packages
left out: scripts/images/nvidia-h200.txt) and checks every wheel's tags against that target.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from orchestrator.lab import cluster as labmod
from orchestrator.lab import raynodes

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
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


def test_the_gpu_check_rehearsed_offline_on_the_gpu_machines_layout(tmp_path: Path) -> None:
    from tests.lab.conftest import require_lab

    require_lab()
    tree, image, bundle, evidence = (tmp_path / d for d in ("tree", "image", "bundle", "evidence"))
    tree.mkdir()
    tree_bytes = _copy_tree(tree)

    # The image: a virtual environment with torch in it, nothing else of collbench's (the GPU
    # machine's python3 is /opt/torch/.venv's, a venv too).
    base_python = getattr(sys, "_base_executable", sys.executable)
    assert _run([base_python, "-m", "venv", str(image)], 120).returncode == 0
    torch_version = importlib.metadata.version("torch")
    got = _run([str(image / "bin/python"), "-m", "pip", "install", "-q", f"torch=={torch_version}"], 600)
    assert got.returncode == 0, got.stderr[-3000:]
    missing = _run([str(image / "bin/python"), "-c", "import ray"], 60)
    assert missing.returncode == 1 and "No module named 'ray'" in missing.stderr
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "VIRTUAL_ENV", "OUT") and not k.startswith(("PYTHON", "COLLBENCH_"))}
    env["PATH"] = f"{image / 'bin'}:{env.get('PATH', '')}"

    start_s = time.monotonic()
    build = _run(["bash", str(tree / "scripts/offline_bundle.sh"), str(bundle)], 900, env=env)
    print(f"\nbundle built by the image's python3 in {time.monotonic() - start_s:.0f} s")
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-3000:]
    (archive,) = bundle.glob("collbench-offline-py*.tar.xz")
    carry_bytes = tree_bytes + archive.stat().st_size
    print(f"carried: tree {tree_bytes / 2**20:.1f} MiB + bundle {archive.stat().st_size / 2**20:.1f} MiB = "
          f"{carry_bytes / 2**20:.1f} MiB (limit {CARRY_LIMIT_BYTES >> 20})")
    assert carry_bytes <= CARRY_LIMIT_BYTES

    ns = "cbgpu" + secrets.token_hex(2)
    subprocess.run(["ip", "netns", "add", ns], check=True, timeout=30)
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True, timeout=30)
        probe = _run([str(image / "bin/python"), "-c",
                      "import socket; socket.create_connection(('pypi.org', 443), timeout=5)"], 30, ns)
        assert probe.returncode != 0 and re.search(r"gaierror|unreachable|Temporary failure", probe.stderr), probe
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
    assert "[gpu_check] step cuda-graph: not run in 0.0 s: no GPU" in out
    # installed beside the image's python: its own torch, nothing of it replaced
    installed = re.search(r"installed from the bundle into (\S+): collbench \S+, ray 2\.\d+\.\d+, (\d+) wheel\(s\) "
                          r"beside the image's \| torch (\S+) from (\S+)", out)
    assert installed, out[-4000:]
    assert installed.group(3) == torch_version and installed.group(4).startswith(str(image))
    assert int(installed.group(2)) > 5  # Ray and what it needs that the image lacks (numpy, pandas, pyarrow here)
    # the verdict: PASS on what a CPU can show, every GPU-only check named as not run
    assert "collbench GPU check: PASS | 2 CPU ranks (rehearsal, no GPU) | 8 collectives x " in out
    assert len(re.findall(r"^\s+not run \(no GPU\): ", out, re.M)) == 7
    assert "[gpu_check] every step that ran passed" in out
    assert {p.name for p in evidence.iterdir()} >= {"gpu_check.log", "doctor.json", "report.json"}


def test_the_bundle_for_the_gpu_machine_holds_wheels_for_its_python(tmp_path: Path) -> None:
    """Python 3.12, glibc 2.35, the image's large packages left out; every wheel's tags checked."""
    from tests.lab.conftest import require_lab

    require_lab()  # needs the package registry and minutes, like the rehearsal
    start_s = time.monotonic()
    build = _run(["bash", str(REPO / "scripts/offline_bundle.sh"), str(tmp_path), "--python", "3.12",
                  "--image", str(REPO / "scripts/images/nvidia-h200.txt")], 900)
    print(f"\n{build.stdout.splitlines()[-1] if build.stdout else ''} ({time.monotonic() - start_s:.0f} s)")
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-3000:]
    assert re.search(r"left out pyarrow-\S+\.whl \(\d+ MiB\): the image has it", build.stdout)
    with tarfile.open(tmp_path / "collbench-offline-py312.tar.xz") as archive:
        names = [Path(n).name for n in archive.getnames()]
        target = archive.extractfile("./target.txt").read().decode()
    wheels = [n for n in names if n.endswith(".whl")]
    plan = _bundle_plan()
    assert [w for w in wheels if not plan.installable(w, (3, 12), (2, 35))] == []
    dists = {plan.wheel_tags(w)[0] for w in wheels}
    assert {"ray", "collbench", "jsonschema"} <= dists and not dists & {"torch", "numpy", "pandas", "pyarrow"}
    assert target.splitlines()[:2] == ["python 3.12", "glibc 2.35"]
    assert (tmp_path / "collbench-offline-py312.tar.xz").stat().st_size < 32 << 20
