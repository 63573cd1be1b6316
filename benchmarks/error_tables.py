"""The one layout of the verdicts' error tables (benchmarks/report_node_errors.py,
report_gpu_errors.py, uplink_errors.py): per noise profile of benchmarks/qualify_rates.py a
markdown table, a row per planted fault, a column per cluster shape, each cell what `cell` gives
(shares printed as percentages, '-' where nothing of that kind was planted), and the time taken."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from benchmarks.qualify_rates import NOISE


def percent(x: float) -> str:
    return "-" if x != x else f"{100 * x:.1f}"


def cells(shares: Sequence[float]) -> str:
    """Shares as `a / b / c` percentages."""
    return " / ".join(percent(x) for x in shares)


def print_tables(profiles: str, legend: str, columns: Sequence[str], faults: Sequence[str],
                 cell: Callable[[str, int, float], str]) -> None:
    """`cell(fault, column index, noise width)` -> the cell's text."""
    started = time.monotonic()
    for name in profiles.split(","):
        noise = NOISE[name].noise.width
        print(f"\n### noise `{name}` (log-normal, sigma {noise})\n")
        print(f"{legend}\n")
        print("| fault | " + " | ".join(columns) + " |")
        print("|---|" + "---:|" * len(columns))
        for fault in faults:
            print(f"| {fault} | " + " | ".join(cell(fault, i, noise) for i in range(len(columns))) + " |", flush=True)
    print(f"\n{time.monotonic() - started:.0f} s")
