"""A run's progress while it runs: how much of its planned work is done (each case weighted by its
estimated time, sweep.estimate), elapsed, and the time left, which starts as the estimate and
moves to what the run measures as it goes. On a terminal one line redrawn in place (a bar, every
half second, so it moves while a slow case runs); in a pipe or a job log a plain line every
PLAIN_EVERY_S seconds, so a Slurm log shows progress without carriage returns.

No library: tqdm and rich are not among collbench's dependencies, and Ray's own progress bars
belong to its tasks; the line needs a lock shared with the rows printed beside it, which the
console (execution.console) holds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from orchestrator.sweep.estimate import Estimate, duration

TICK_S = 0.5
PLAIN_EVERY_S = 30.0
BAR = 20


@dataclass
class Work:
    """The planned work and what of it is done, in estimated seconds."""

    cases_s: dict[str, tuple[float, ...]]  # group id -> each case's estimated seconds
    prior_s: float | None  # the estimate's time for the run (its start-up's too: the line's clock starts
    # with it); None where nothing prices it (a replay without the job's own times)
    done_cases: dict[str, int] = field(default_factory=dict)
    ended: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, estimate: Estimate, group_ids: list[str]) -> Work:
        cases = {g: estimate.cases_s.get(g, ()) for g in group_ids}
        return cls(cases, estimate.seconds)

    @classmethod
    def unpriced(cls, group_ids: list[str], seconds: float | None) -> Work:
        """Groups of one case each, which no estimate prices (a replay): `seconds` in all, where
        something else says (the trace's own times), else unknown until a group ends."""
        return cls({g: (1.0,) for g in group_ids}, seconds)

    def total_s(self) -> float:
        return sum(sum(c) or 1.0 for c in self.cases_s.values())

    def done_s(self) -> float:
        out = 0.0
        for g, cases in self.cases_s.items():
            out += (sum(cases) or 1.0) if g in self.ended else sum(cases[:self.done_cases.get(g, 0)])  # one a size
        return out

    def fraction(self) -> float:
        total = self.total_s()
        return min(1.0, self.done_s() / total) if total > 0 else 0.0

    def left_s(self, elapsed_s: float) -> float | None:
        """The estimate's time left at first; the measured pace's as the done fraction f grows:
        (1 - f) x (f x elapsed / f + (1 - f) x estimate), each weighted by how much it has seen.
        Without an estimate, the pace's alone (None before anything is done)."""
        f = self.fraction()
        if self.prior_s is None:
            return elapsed_s * (1 - f) / f if f > 0 else None
        return max(0.0, (1 - f) * (elapsed_s + (1 - f) * self.prior_s)) if f > 0 else max(0.0, self.prior_s - elapsed_s)

    def cases(self) -> tuple[int, int]:
        done = sum(len(c) if g in self.ended else min(self.done_cases.get(g, 0), len(c)) for g, c in self.cases_s.items())
        return done, sum(len(c) for c in self.cases_s.values())


class LiveLine:
    """The line itself: drawn by a ticker thread and around each printed line, under `lock`."""

    def __init__(self, work: Work, write: Callable[[str], None], terminal: bool,
                 clock: Callable[[], float] = time.monotonic, label: str = "", unit: str = "groups") -> None:
        """`label`: what the line's work is, before its counts (qualify: `round 3: `); `unit`: what
        its groups are called (qualify's are probes)."""
        self.work, self.write, self.terminal, self.clock = work, write, terminal, clock
        self.label, self.unit = label, unit
        self.t0 = clock()
        self.lock = threading.RLock()
        self.shown = False
        self.last_plain = self.t0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    def text(self) -> str:
        elapsed = self.clock() - self.t0
        f = self.work.fraction()
        done, total = self.work.cases()
        groups = len(self.work.ended), len(self.work.cases_s)
        left = self.work.left_s(elapsed)
        said = (f"{self.label}{groups[0]}/{groups[1]} {self.unit}, {done}/{total} cases, {duration(elapsed)} elapsed, "
                + (f"~{duration(left)} left" if left is not None else "time left unknown"))
        if not self.terminal:
            return f"[progress] {said}"
        filled = int(round(f * BAR))
        return f"[{'#' * filled}{'.' * (BAR - filled)}] {f:4.0%} {said}"

    def draw(self) -> None:
        with self.lock:
            if self.terminal:
                self.write("\r" + self.text() + "\033[K")
                self.shown = True
            elif self.clock() - self.last_plain >= PLAIN_EVERY_S:
                self.last_plain = self.clock()
                self.write(self.text() + "\n")

    def clear(self) -> None:
        """Before a line is printed beside it (a terminal only): the live line goes, redrawn after."""
        with self.lock:
            if self.terminal and self.shown:
                self.write("\r\033[K")
                self.shown = False

    def start(self) -> None:
        def tick() -> None:
            while not self._stop.wait(TICK_S):
                self.draw()

        self._thread = threading.Thread(target=tick, name="collbench-progress", daemon=True)
        self._thread.start()
        self.draw()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * TICK_S)
        self.clear()
