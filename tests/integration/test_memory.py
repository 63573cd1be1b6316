"""The memory check's estimate against the measured peak of the harness (CPU, gloo, one rank):
each case runs in a fresh process, and the rise of its peak resident memory over a small warm-up
case is compared with what `sweep.devices.case_bytes` says that case needs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from orchestrator.sweep.devices import case_bytes
from workloads.messages import Case

MIB = 1 << 20
SIZE = 128 * MIB

# Peak resident memory of this process' own address space (VmHWM): ru_maxrss would carry over the
# parent's (pytest's) size at exec.
_CHILD = r"""
import sys, torch, torch.distributed as dist
from workloads.harness import run_case
from workloads.messages import Case
coll, dtype, op, in_place, count = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1", int(sys.argv[5])
dist.init_process_group("gloo", store=dist.TCPStore("127.0.0.1", 0, 1, True), rank=0, world_size=1)
warm = Case(coll, dtype, op, in_place, (1 << 16,), 3, 1, 1)
run_case(warm, 0, 1, torch.device("cpu"))
def peak_bytes():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
def rss_bytes():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak starts again from what is resident now
before = rss_bytes()
(sample,) = run_case(Case(coll, dtype, op, in_place, (count,), 3, 1, 1), 0, 1, torch.device("cpu"))
assert sample.n_wrong == 0 and len(sample.iter_time_us) == 3
print(peak_bytes() - before)
"""


@pytest.mark.parametrize("collective, op, in_place", [
    ("all_reduce", "sum", True),
    ("all_to_all", "none", False),
    ("all_gather", "none", False),
    ("reduce_scatter", "sum", True),
    ("reduce_scatter", "sum", False),
    ("broadcast", "none", True),
])
def test_estimate_matches_the_measured_peak(collective, op, in_place):
    case_count = SIZE // 4
    proc = subprocess.run([sys.executable, "-c", _CHILD, collective, "float32", op, "1" if in_place else "0",
                           str(case_count)], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    measured = int(proc.stdout.strip().splitlines()[-1])
    estimate = case_bytes(Case(collective, "float32", op, in_place, (case_count,), 3, 1, 1), 1, "gloo")
    assert 0.9 * estimate <= measured <= 1.05 * estimate + 8 * MIB, (measured / MIB, estimate / MIB)
