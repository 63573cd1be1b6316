"""Where a run's own lines go (what it does, what went wrong): the command line's stdout and
stderr, or nowhere (a Python caller that did not ask for them). What a run says of itself goes
through one (the console, an observer the caller chooses, prints the table)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

Say = Callable[[str], None]


@dataclass(frozen=True)
class Voice:
    """Where a run's own lines go: `info` (what it is doing: the command line's stdout) and
    `problem` (what went wrong or was cut short: stderr); None says nothing."""

    info: Say | None = None
    problem: Say | None = None

    def say(self, line: str) -> None:
        if self.info:
            self.info(line)

    def warn(self, line: str) -> None:
        if self.problem:
            self.problem(line)


def _print_to(stream_name: str) -> Say:
    return lambda line: print(line, file=getattr(sys, stream_name), flush=True)  # the stream at call time


COMMAND_LINE = Voice(_print_to("stdout"), _print_to("stderr"))
QUIET = Voice()
