"""What NCCL's RAS service (NCCL 2.24+) says is missing from a job, read from its answer: pure
parsers of the `ncclras` client's text (`STATUS`) and of its JSON (`SET FORMAT json`, NCCL
2.28.7+), and the records they give. Formats: NCCL's docs (troubleshooting/ras.html: "Sample
Output", "JSON Output") and the formatter, src/ras/client_support.cc (2.24.3 to 2.30.7).
execution.ras asks a node for it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class RasProcess:
    """A job process, as RAS names it: its pid, its node's RAS address, the GPUs it manages."""

    pid: int
    node: str
    gpus: str  # as NCCL prints them: "5", "0,1", "3 (NVML 5)"


@dataclass(frozen=True)
class RasRank:
    """A communicator rank that RAS has no data from."""

    comm: str  # the communicator's hash, 16 hex digits (NCCL's debug log prints it as commId)
    rank: int
    pid: int | None = None  # None where NCCL did not say (2.24-2.25 print the rank alone)
    node: str | None = None
    gpu: str | None = None
    dead: bool | None = None  # JSON only: considered dead, not merely unresponsive


@dataclass(frozen=True)
class RasReport:
    """What one RAS answer says is missing or failing; empty tuples where all is well."""

    missing: tuple[RasProcess, ...] = ()  # reachable processes that sent no communicator data
    dead: tuple[RasProcess, ...] = ()  # processes RAS considers dead (unreachable for 60 s)
    n_missing: int = 0  # as NCCL counts them: it lists the processes only when they are outliers
    n_dead: int = 0
    ranks: tuple[RasRank, ...] = ()  # communicator ranks with no data
    errors: tuple[str, ...] = ()  # communicators with initialization or asynchronous errors
    timeouts: int = 0  # RAS's own communication timeouts while gathering

    def summary(self, pids: set[int] | None = None) -> str:
        """One line: what is dead or missing (only `pids`' processes and ranks, where given)."""
        def keep(pid: int | None) -> bool:
            return pids is None or pid is None or pid in pids

        parts = []
        dead = [p for p in self.dead if keep(p.pid)]
        missing = [p for p in self.missing if keep(p.pid)]
        if dead or (self.n_dead and pids is None):
            parts.append(f"{self.n_dead if pids is None else len(dead)} dead: {_processes(dead)}".rstrip(": "))
        if missing or (self.n_missing and pids is None):
            parts.append(f"{self.n_missing if pids is None else len(missing)} sent no data: {_processes(missing)}"
                         .rstrip(": "))
        by_comm: dict[str, list[RasRank]] = {}
        for r in self.ranks:
            if keep(r.pid):
                by_comm.setdefault(r.comm, []).append(r)
        parts += [f"communicator {comm} misses rank{'s' if len(ranks) > 1 else ''} "
                  + ", ".join(_rank(r) for r in ranks) for comm, ranks in by_comm.items()]
        parts += list(self.errors)
        if self.timeouts:
            parts.append(f"{self.timeouts} RAS timeout{'s' if self.timeouts > 1 else ''} while gathering")
        return "; ".join(parts) or "no process or rank missing"


def _processes(processes: list[RasProcess]) -> str:
    return ", ".join(f"pid {p.pid} on {p.node} (GPU {p.gpus})" for p in processes)


def _rank(r: RasRank) -> str:
    return f"{r.rank}" + (f" (pid {r.pid} on {r.node})" if r.pid is not None else "") + (" dead" if r.dead else "")


# -- text ----------------------------------------------------------------------------------
_PROCESS = re.compile(r"^Process (\d+) on node (\S+) managing GPUs? (.+)$")
_COMM = re.compile(r"^#\d+-\d+ \(([0-9a-f]+)\) (INCOMPLETE|ERROR|MISMATCH)$")
_RANK = re.compile(r"^Rank (\d+) -- (?:GPU (.+) managed by process (\d+) on node (\S+)|\[process information not found\])$")
_RANK_LIST = re.compile(r"^The missing ranks?: ([\d,]+)$")  # 2.24-2.25
_N_MISSING = re.compile(r"^Missing communicator data from (\d+) job process")
_N_DEAD = re.compile(r"^(\d+) job process(?:es are| is) considered dead")
_ERROR = re.compile(r"^(?:Initialization|Asynchronous) errors? on \d+ ranks?$")
_TIMEOUTS = re.compile(r"^Encountered (\d+) communication timeouts? while gathering communicator data")


def parse_text(text: str) -> RasReport:
    """The `STATUS` answer in text: its Errors section (INCOMPLETE, DEAD, per-communicator INCOMPLETE
    and ERROR) and the TIMEOUT warning; the summary tables and MISMATCH warnings say nothing missing."""
    lines = [line.strip() for line in text.splitlines()]
    found: dict[str, list] = {"missing": [], "dead": [], "ranks": [], "errors": []}
    counts = {"n_missing": 0, "n_dead": 0, "timeouts": 0}
    section = block = comm = None
    for i, line in enumerate(lines):
        underline = lines[i + 1] if i + 1 < len(lines) else ""
        if line in ("Errors", "Warnings") and underline and set(underline) == {"="}:
            section, block = line, None
            continue
        if section is None or not line or set(line) == {"="}:
            continue
        if line in ("INCOMPLETE", "DEAD", "TIMEOUT"):
            block = line
        elif m := _COMM.match(line):
            block, comm = f"comm {m.group(2)}", m.group(1)
        elif m := _N_MISSING.match(line):
            counts["n_missing"] = int(m.group(1))
        elif m := _N_DEAD.match(line):
            counts["n_dead"] = int(m.group(1))
        elif (m := _PROCESS.match(line)) and block in ("INCOMPLETE", "DEAD"):
            found["missing" if block == "INCOMPLETE" else "dead"].append(RasProcess(int(m.group(1)), m.group(2),
                                                                                   m.group(3)))
        elif (m := _RANK.match(line)) and block == "comm INCOMPLETE":
            pid = int(m.group(3)) if m.group(3) else None
            found["ranks"].append(RasRank(comm, int(m.group(1)), pid, m.group(4), m.group(2)))
        elif (m := _RANK_LIST.match(line)) and block == "comm INCOMPLETE":
            found["ranks"] += [RasRank(comm, int(r)) for r in m.group(1).split(",") if r]
        elif _ERROR.match(line) and block == "comm ERROR":
            found["errors"].append(f"communicator {comm}: {line}")
        elif m := _TIMEOUTS.match(line):
            counts["timeouts"] = int(m.group(1))
    return RasReport(**{k: tuple(v) for k, v in found.items()}, **counts)


# -- JSON ----------------------------------------------------------------------------------
# NCCL 2.28.7-2.28.9 write a missing rank's `"nvml_dev": N` without the comma before `"status"`
_MISSING_COMMA = re.compile(r'("nvml_dev": -?\d+)(\s*\n\s*"status")')
_FINE = (0, 7)  # ncclSuccess, ncclInProgress


def parse_json(text: str) -> RasReport:
    """The `STATUS` answer in JSON (NCCL 2.28.7+): missing ranks with their hosts, unresponsive or
    dead; ranks whose init_state or async_error is an error. Raises ValueError if it is not JSON."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        doc = json.loads(_MISSING_COMMA.sub(r"\1,\2", text))
    ranks, errors = [], []
    for c in doc.get("communicators") or []:
        comm = f"{int(str(c.get('hash', '0')), 16):016x}"
        for m in c.get("missing_ranks") or []:
            status = m.get("status") or {}
            ranks.append(RasRank(comm, int(m["rank"]), m.get("pid"), m.get("host"), _gpu(m),
                                 bool(status.get("considered_dead"))))
        for r in c.get("ranks") or []:
            status = r.get("status") or {}
            bad = {k: status.get(k) for k in ("init_state", "async_error") if status.get(k, 0) not in _FINE}
            if bad:
                said = ", ".join(f"{k} {v}" for k, v in bad.items())
                errors.append(f"communicator {comm}: rank {r.get('rank')} on {r.get('host')} {said}")
    processes: dict[tuple, RasProcess] = {}
    for r in ranks:
        processes.setdefault((r.dead, r.node, r.pid), RasProcess(r.pid or 0, r.node or "?", r.gpu or "?"))
    dead = tuple(p for (is_dead, _, _), p in processes.items() if is_dead)
    missing = tuple(p for (is_dead, _, _), p in processes.items() if not is_dead)
    timeouts = int((doc.get("ras") or {}).get("timeouts_count") or 0)
    return RasReport(missing, dead, len(missing), len(dead), tuple(ranks), tuple(errors), timeouts)


def _gpu(rank: dict) -> str | None:
    cuda, nvml = rank.get("cuda_dev"), rank.get("nvml_dev")
    return None if cuda is None else str(cuda) if nvml in (None, cuda) else f"{cuda} (NVML {nvml})"


def parse(text: str) -> RasReport:
    """Either form, told apart by its first character."""
    return parse_json(text) if text.lstrip().startswith("{") else parse_text(text)
