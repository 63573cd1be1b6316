"""The offline bundle (scripts/offline_bundle.sh) is all a machine without a registry needs besides
torch: built here for this Python, it installs with `pip install --no-index` into a fresh virtual
environment inside a network namespace that has only loopback, and `collbench run` (embedded Ray,
the default sweep) passes from it, its rows read back.

Building the bundle downloads ~190 MB of wheels from the registry and xz-compresses them: the
build's time and the bundle's size are printed (run with -s), not asserted.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.lab import cluster as labmod
from orchestrator.lab import raynodes

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
DEFAULT_COLLECTIVES = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "send_recv"}


def _run(cmd: list[str], timeout_s: float, netns: str | None = None, **kwargs) -> subprocess.CompletedProcess:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    return subprocess.run(prefix + cmd, check=False, capture_output=True, text=True, timeout=timeout_s, **kwargs)


def test_bundle_installs_without_network_and_runs(tmp_path: Path) -> None:
    from tests.lab.conftest import require_lab

    require_lab()
    bundle, venv, out = tmp_path / "bundle", tmp_path / "venv", tmp_path / "results"

    start_s = time.monotonic()
    # The size limit is the script's default; what it measured is printed either way.
    build = _run(["bash", str(REPO / "scripts/offline_bundle.sh"), str(bundle)], timeout_s=900)
    build_s = time.monotonic() - start_s
    size_line = next((ln for ln in build.stdout.splitlines() if ln.startswith("offline bundle:")), "")
    print(f"\n{size_line}\nbundle built in {build_s:.0f} s")
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-3000:]
    assert not list(bundle.glob("*.partial"))

    # The image's part: a fresh environment (no system site-packages) holding only torch, installed
    # the way this machine's pip finds it (a local wheel).
    base_python = getattr(sys, "_base_executable", sys.executable)
    assert _run([base_python, "-m", "venv", str(venv)], timeout_s=120).returncode == 0
    torch_version = importlib.metadata.version("torch")
    torch_install = _run([str(venv / "bin/python"), "-m", "pip", "install", "-q", f"torch=={torch_version}"],
                         timeout_s=600)
    assert torch_install.returncode == 0, torch_install.stderr[-3000:]

    ns = "cboff" + secrets.token_hex(2)
    subprocess.run(["ip", "netns", "add", ns], check=True, timeout=30)
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True, timeout=30)
        # No route out: the registry cannot be what the install reads.
        probe = _run([str(venv / "bin/python"), "-c",
                      "import socket; socket.create_connection(('pypi.org', 443), timeout=5)"], 30, ns)
        assert probe.returncode != 0 and re.search(r"gaierror|unreachable|Temporary failure", probe.stderr), probe

        install = _run(["bash", str(REPO / "scripts/install_bundle.sh"), str(bundle), str(venv)], 600, ns)
        assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-3000:]
        assert f"from {venv}" in install.stdout, install.stdout  # torch is the environment's own
        site = next((venv / "lib").glob("python3.*/site-packages"))
        assert (site / "ray/_raylet.so").is_file() and not (site / "ray/jars").exists()
        assert not (site / "ray/rllib").exists() and not (site / "ray/llm").exists()

        # From outside the checkout, so the installed collbench runs, not this tree's.
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS" and not k.startswith("PYTHON")}
        env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
        start_s = time.monotonic()
        run = _run([str(venv / "bin/collbench"), "run", "--output", str(out)], 420, ns, cwd=tmp_path, env=env)
        print(f"collbench run inside the namespace: {time.monotonic() - start_s:.0f} s")
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    finally:
        raynodes.kill_pids(labmod.netns_pids(ns), signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", ns], check=False, timeout=30)

    rows = pd.read_parquet(out)
    assert set(rows.collective) == DEFAULT_COLLECTIVES
    assert (rows.status == "ok").all(), rows[rows.status != "ok"][["collective", "msg_bytes", "status"]]
    assert (rows.n_wrong == 0).all()
    assert rows.msg_bytes.min() == 16 and rows.msg_bytes.max() == 16 << 20  # the default sweep, 16 B .. 16 MiB
    assert rows.run_id.nunique() == 1
