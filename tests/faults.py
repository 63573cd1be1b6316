"""Helpers to inject faults from outside, as they happen in life: find worker processes, follow a
running `collbench run` line by line."""

from __future__ import annotations

import os
import queue
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


class LiveRun:
    """`python -m orchestrator ARGS` with its output lines collected as they come."""

    def __init__(self, args: list[str], env: dict) -> None:
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env,
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
        raise AssertionError(f"no line with {text!r} within {timeout}s:\n{''.join(self.stdout)}\n{''.join(self.stderr)}")

    def finish(self, timeout: float) -> int:
        rc = self.proc.wait(timeout=timeout)
        time.sleep(0.2)  # let the pump threads drain
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
