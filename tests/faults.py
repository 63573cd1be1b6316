"""Helpers to inject faults from outside, as they happen in life: find worker processes, follow a
running `collbench run` line by line."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time


def worker_pids(executing: str | None = None) -> dict[int, str]:
    """PID -> process title of every BenchWorker actor process (Ray titles them
    `ray::BenchWorker` when idle and `ray::BenchWorker.METHOD` while running METHOD)."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    title = f.read().split(b"\0")[0].decode(errors="replace")
            except OSError:
                continue
            if title.startswith("ray::BenchWorker") and (executing is None or title.endswith("." + executing)):
                out[int(entry)] = title
    return out


def _as_a_terminal_starts_it() -> None:
    """SIGINT as a shell at a terminal leaves it for a command it starts: a suite started in the
    background (`.ci/run &`, nohup) runs with SIGINT ignored, which every child inherits, and Python
    then installs no KeyboardInterrupt handler: a Ctrl-C test would measure the harness, not collbench."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class LiveRun:
    """`python -m orchestrator ARGS` with its output lines collected as they come."""

    def __init__(self, args: list[str], env: dict) -> None:
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env, preexec_fn=_as_a_terminal_starts_it,
        )
        self.lines: queue.Queue[tuple[float, str]] = queue.Queue()
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        for stream, sink in ((self.proc.stdout, self.stdout), (self.proc.stderr, self.stderr)):
            threading.Thread(target=self._pump, args=(stream, sink), daemon=True).start()

    def _pump(self, stream, sink) -> None:
        for line in stream:
            sink.append(line)
            self.lines.put((time.monotonic(), line))

    def wait_for(self, text: str, timeout: float) -> float:
        """Block until a line containing `text` appears; return when it did (monotonic)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                t, line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if text in line:
                return t
        said = "".join(self.stdout) + "\n" + "".join(self.stderr)
        raise AssertionError(f"no line with {text!r} within {timeout}s:\n{said}")

    def signal_when(self, text: str, sig: int, timeout: float = 180, pause_s: float = 0.0) -> int:
        """Send `sig` once a line with `text` appears (and `pause_s` later), wait for the process to end
        and return its exit code (also kept as `returncode`); the process is killed whatever fails."""
        try:
            self.wait_for(text, timeout=timeout)
            time.sleep(pause_s)
            self.proc.send_signal(sig)
            self.returncode = self.finish(timeout=60)
        finally:
            self.kill()
        return self.returncode

    def finish(self, timeout: float) -> int:
        rc = self.proc.wait(timeout=timeout)
        time.sleep(0.2)  # let the pump threads drain
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class CpuHold:
    """Hold one process's CPU down, as a noisy neighbour or a cgroup limit does in life: a cgroup
    with a CPU quota of `share` of one CPU (v1 cpu controller, or v2 cpu.max). `hold(pid)` moves it
    in; `release()` moves it back and removes the cgroup. `available()` says why not, if it cannot."""

    V1, V2 = "/sys/fs/cgroup/cpu", "/sys/fs/cgroup"

    def __init__(self, share: float, name: str = "collbench-hold") -> None:
        self.share, self.period_us = share, 100_000
        self.v1 = os.path.isfile(f"{self.V1}/cpu.cfs_quota_us")
        self.dir = f"{self.V1 if self.v1 else self.V2}/{name}"
        self.held: list[int] = []

    @classmethod
    def available(cls) -> str | None:
        if os.geteuid() != 0:
            return "holding a CPU down needs root (cgroups)"
        if os.path.isfile(f"{cls.V1}/cpu.cfs_quota_us"):
            return None
        if os.path.isfile(f"{cls.V2}/cgroup.controllers") and "cpu" in open(f"{cls.V2}/cgroup.controllers").read():
            return None
        return "no cgroup CPU controller (v1 cpu or v2 cpu.max) to hold a CPU down with"

    def hold(self, pid: int) -> None:
        os.makedirs(self.dir, exist_ok=True)
        quota = int(self.share * self.period_us)
        if self.v1:
            self._write("cpu.cfs_period_us", str(self.period_us))
            self._write("cpu.cfs_quota_us", str(quota))
        else:
            with open(f"{self.V2}/cgroup.subtree_control", "w") as f:
                f.write("+cpu")
            self._write("cpu.max", f"{quota} {self.period_us}")
        self._write("cgroup.procs", str(pid))
        self.held.append(pid)

    def members(self) -> list[int]:
        """The processes in the hold's cgroup now."""
        try:
            with open(f"{self.dir}/cgroup.procs") as f:
                return [int(line) for line in f if line.strip()]
        except OSError:
            return []

    def release(self) -> None:
        root = self.V1 if self.v1 else self.V2
        for pid in self.held:
            try:
                with open(f"{root}/cgroup.procs", "w") as f:
                    f.write(str(pid))
            except OSError:
                pass  # it has ended
        try:
            os.rmdir(self.dir)
        except OSError:
            pass

    def _write(self, name: str, value: str) -> None:
        with open(f"{self.dir}/{name}", "w") as f:
            f.write(value)
