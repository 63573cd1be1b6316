"""Starting and stopping Ray node processes that this program owns, by process session.

Each node is `ray start --block` in a new process session (optionally inside a network
namespace); everything it spawns (GCS, raylet, workers) stays in that session, so stopping
it kills exactly those processes: never `ray stop`, which kills every Ray process on the machine.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time

# Ray runs its workers at nice 15 unless told otherwise: any other process of the node then takes
# the CPU a measuring rank wants first (a busy loop on one core of two left the ranks 3.6-26x
# oversubscribed: docs/PERFORMANCE.md section 7.1). Wherever collbench starts Ray, its workers run at 0.
MEASURING_NICENESS = {"RAY_worker_niceness": "0"}


def ray_start(args: list[str], log_path: str, netns: str | None = None, env: dict | None = None) -> int:
    """Start `ray start --block ARGS` in a new session (its workers at nice 0: MEASURING_NICENESS);
    return its PID (= session id)."""
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    cmd = [ray_bin, "start", "--block", "--disable-usage-stats", *args]
    if netns:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env={**os.environ, **MEASURING_NICENESS, **(env or {})},
        )
    return proc.pid


def session_pids(sid: int) -> list[int]:
    """PIDs of every live process in session `sid`."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            # after the command: state ppid pgrp session ...
            if int(fields[3]) == sid and fields[0] != "Z":
                pids.append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    return pids


def kill_pids(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def stop_sessions(sids: list[int], grace_s: float = 10.0) -> None:
    """SIGTERM every process of the sessions, then SIGKILL what is left after `grace_s`."""
    kill_pids([p for sid in sids for p in session_pids(sid)], signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(session_pids(s) for s in sids):
        time.sleep(0.2)
    kill_pids([p for sid in sids for p in session_pids(sid)], signal.SIGKILL)
    for sid in sids:
        try:
            os.waitpid(sid, os.WNOHANG)
        except ChildProcessError:
            pass


def wait_port(host: str, port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1):
                return True
        except OSError:
            time.sleep(0.2)
    return False


def log_tail(path: str, lines: int = 4) -> str:
    """A log's last lines, joined, for an error said after the log is removed (a failed lab's)."""
    try:
        with open(path, errors="replace") as f:
            last = [line.strip() for line in f.read().splitlines()[-lines:] if line.strip()]
    except OSError as e:
        return f"its log {path} cannot be read ({e.strerror})"
    return "its log ended: " + " | ".join(line[:300] for line in last) if last else f"its log {path} is empty"


def free_port() -> int:
    """A port free right now (for `ray start --port`; Ray binds it at once)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def private_port_args(head: bool) -> list[str]:
    """Free ports for every listener of one Ray node, so that several clusters can share a
    machine (or a network namespace) without colliding on Ray's fixed defaults."""
    names = ["--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--metrics-export-port",
             "--runtime-env-agent-port", "--node-manager-port", "--object-manager-port"]
    if head:
        names += ["--ray-client-server-port", "--dashboard-port"]
    return [f"{name}={free_port()}" for name in names]


def auth_env(token_path: str) -> dict[str, str]:
    """Environment for the processes and clients of a token-authenticated cluster whose token
    is the file `token_path` (created, readable by its owner only, when missing)."""
    if not os.path.exists(token_path):
        fd = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": token_path}
