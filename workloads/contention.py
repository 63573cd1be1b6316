"""How contended a rank's host was while it measured one size: what `compare` needs to tell a
slower link from a busier host. Torch-free; reads /proc where it exists (Linux), nothing elsewhere.

Over the measurement of one size (warm-up, timed and check iterations), a rank reads:
- its process's CPU time (every thread) against the wall time: `cpu_busy_frac`;
- the time its threads were ready to run but waited for a CPU (the scheduler's run delay,
  /proc/self/task/*/schedstat), against the wall time: `cpu_wait_frac`, the direct measure of
  another process taking the CPU a rank wanted (a busy loop on one of two cores: ~0.4);
- the node's 1-minute load average against its CPU count, at the end: `load_per_cpu`
  (above 1: more runnable work than CPUs);
- the share of the node's CPU time the hypervisor gave to other guests (/proc/stat's steal):
  `steal_frac`, None where the kernel does not count it or no clock tick fell inside the window.
The driver combines ranks (orchestrator.execution.rows) and compare reads them (judging.contention).
"""

from __future__ import annotations

import glob
import os
import time

from workloads.messages import HostLoad

SCHEDSTAT = "/proc/self/task/*/schedstat"
PROC_STAT = "/proc/stat"


def run_delay_ns() -> int | None:
    """Nanoseconds this process's threads have waited on a run queue, summed; None without schedstat."""
    total, seen = 0, False
    for path in glob.glob(SCHEDSTAT):
        try:
            with open(path) as f:
                total += int(f.read().split()[1])
            seen = True
        except (OSError, IndexError, ValueError):  # a thread that ended while we read
            continue
    return total if seen else None


def _cpu_line(text: str) -> list[int] | None:
    """/proc/stat's aggregate `cpu` line, its first 8 counters: user nice system idle iowait irq
    softirq steal (guests are in user already); None where it has fewer (kernels before 2.6.11)."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [int(v) for v in fields[1:]]
            return values[:8] if len(values) >= 8 else None
    return None


def steal_and_total(text: str) -> tuple[int, int] | None:
    """(Steal jiffies, all jiffies) from /proc/stat's aggregate `cpu` line; None where it has no
    steal field (kernels before 2.6.11, or no /proc)."""
    values = _cpu_line(text)
    return None if values is None else (values[7], sum(values))


def _read_stat() -> list[int] | None:
    try:
        with open(PROC_STAT) as f:
            return _cpu_line(f.read())
    except OSError:
        return None


def _stat() -> tuple[int, int] | None:
    values = _read_stat()
    return None if values is None else (values[7], sum(values))


class Meter:
    """Started before a size is measured, read after it: the HostLoad of that window."""

    def __init__(self) -> None:
        self.wall_s = time.perf_counter()
        self.cpu_s = time.process_time()
        self.delay_ns = run_delay_ns()
        self.stat = _stat()

    def read(self) -> HostLoad:
        wall_s = max(time.perf_counter() - self.wall_s, 1e-9)
        busy = (time.process_time() - self.cpu_s) / wall_s
        delay = run_delay_ns()
        wait = (delay - self.delay_ns) / 1e9 / wall_s if delay is not None and self.delay_ns is not None else None
        stat = _stat()
        steal = None
        if stat is not None and self.stat is not None and stat[1] > self.stat[1]:
            steal = (stat[0] - self.stat[0]) / (stat[1] - self.stat[1])
        try:
            load = os.getloadavg()[0] / (os.cpu_count() or 1)
        except OSError:
            load = None
        return HostLoad(cpu_busy_frac=busy, cpu_wait_frac=max(wait, 0.0) if wait is not None else None,
                        load_per_cpu=load, steal_frac=steal)


def busy_cpus(window_s: float = 0.25) -> float | None:
    """CPUs' worth of work this host did over the next `window_s` seconds (/proc/stat: every mode but
    idle and iowait), less this process's own: how much of the host other work holds now (the
    estimate before a run, orchestrator.sweep.estimate.busy_factor); None without /proc/stat."""
    first, mine, started = _read_stat(), time.process_time(), time.perf_counter()
    time.sleep(window_s)
    last = _read_stat()
    if first is None or last is None or sum(last) <= sum(first):
        return None
    idle = lambda v: v[3] + v[4]  # noqa: E731 - idle and iowait
    cpus = os.cpu_count() or 1
    busy = (1 - (idle(last) - idle(first)) / (sum(last) - sum(first))) * cpus
    own = (time.process_time() - mine) / max(time.perf_counter() - started, 1e-9)
    return max(0.0, busy - own)
