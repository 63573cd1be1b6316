"""NCCL's own diagnostics (NCCL 2.31+), as far as the doctor can speak of them before a run.

NCCL's docs (troubleshooting/diagnostics.html and ras.html, "RAS Diagnostics"): active diagnostics
(`NCCL_RUN_DIAGNOSTICS=1`) exchange data over every P2P path a communicator will use while it is
created; RAS diagnostics (`NCCL_RUN_RAS_DIAGNOSTICS=1`, or on demand: `ncclras -D`, `diagnostics` on the
RAS socket) compare the GPUs, driver, ECC, NVLinks and NCCL_* variables of its ranks. Both print a
report on the standard output of each communicator's rank 0 (on demand: over the RAS connection),
one line each: `[<host>:<pid> ]NCCL DIAG <text>`, a `=== ... ===` header, results tagged `[OK]` or
`[INFO]` (`<check>: <message>`), a `... completed in ...` line; `BUSY: diagnostics already in
progress` refuses a second on-demand request. Nothing runs before a communicator exists, so the
doctor says whether the nodes' NCCL can and will run them (`check`); `parse_report` reads a report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.doctor.checks import OK, SKIP, Check
from orchestrator.doctor.facts import NodeFacts

MIN_NCCL = (2, 31)
SWITCHES = ("NCCL_RUN_DIAGNOSTICS", "NCCL_RUN_RAS_DIAGNOSTICS")
NAME = "NCCL diagnostics"


def check(n: NodeFacts) -> Check:
    """Whether the node's NCCL runs its diagnostics at communicator set-up ("skipped: ..." where it
    cannot: no GPU, a version below 2.31 or none read). Never a warning: they are an aid."""
    if not n.gpus:
        return Check(NAME, SKIP, "skipped: no GPU on the node")
    version = _version(n.nccl)
    if version is None:
        return Check(NAME, SKIP, "skipped: NCCL's version not read")
    if version < MIN_NCCL:
        return Check(NAME, SKIP, f"skipped: NCCL {n.nccl} below {'.'.join(map(str, MIN_NCCL))}")
    on = [name for name in SWITCHES if n.env.get(name, "").strip() == "1"]
    if on:
        return Check(NAME, OK, f"NCCL {n.nccl} runs its diagnostics at every communicator set-up ({', '.join(on)}): "
                     "`NCCL DIAG` lines on the stdout of each communicator's rank 0")
    return Check(NAME, OK, f"NCCL {n.nccl} can check its P2P paths and the ranks' configuration at communicator "
                 "set-up; not asked", "--env NCCL_RUN_DIAGNOSTICS=1 (P2P paths) or NCCL_RUN_RAS_DIAGNOSTICS=1 "
                 "(GPUs, driver, ECC, NVLink, NCCL_* alike): the report is on rank 0's stdout")


def _version(text: str | None) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


@dataclass(frozen=True)
class DiagResult:
    tag: str  # OK, INFO
    check: str  # "p2p", "GPU inventory", "NCCL environment", ...
    message: str
    source: str | None = None  # host:pid of the process that printed it, where the line says


@dataclass(frozen=True)
class DiagReport:
    title: str | None = None  # "NCCL Diagnostics", "RAS Diagnostics"
    results: tuple[DiagResult, ...] = ()
    completed: str | None = None  # "NCCL diagnostics completed in 245.3 ms across 8 ranks"
    busy: bool = False  # an on-demand request refused while another runs

    @property
    def issues(self) -> tuple[DiagResult, ...]:
        """The results NCCL tagged for review ([INFO])."""
        return tuple(r for r in self.results if r.tag != "OK")


_LINE = re.compile(r"^(?:(\S+:\d+) )?NCCL DIAG (.*?)\s*$")
_RESULT = re.compile(r"^\[(OK|INFO)\]\s+([^:]+): (.*)$")


def parse_report(text: str) -> DiagReport:
    """A report's `NCCL DIAG` lines among any others (a process' whole stdout will do)."""
    title = completed = None
    results = []
    busy = False
    for line in text.splitlines():
        if line.strip().startswith("BUSY: diagnostics already in progress"):
            busy = True
        if not (m := _LINE.match(line.strip())):
            continue
        source, body = m.groups()
        if body.startswith("===") and body.endswith("==="):
            title = body.strip("= ")
        elif r := _RESULT.match(body):
            results.append(DiagResult(r.group(1), r.group(2).strip(), r.group(3), source))
        elif " completed in " in body:
            completed = body
    return DiagReport(title, tuple(results), completed, busy)
