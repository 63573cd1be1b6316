"""What NCCL's RAS service (NCCL 2.24+) says is missing from a job: processes it has no data from or
considers dead, and communicator ranks that did not answer, with their nodes. Pure parsers of the
`ncclras` client's text (`STATUS`) and of its JSON (`SET FORMAT json`, NCCL 2.28.7+), and `query`,
which asks one node's RAS socket itself over the documented text protocol (every wait bounded).

Formats: NCCL's docs (troubleshooting/ras.html: "Sample Output", "JSON Output") and the formatter,
src/ras/client_support.cc (2.24.3 to 2.30.7); the protocol from src/ras/client.cc: `CLIENT PROTOCOL
2` answered by `SERVER PROTOCOL <n>`, `TIMEOUT <s>` and `SET FORMAT json` each answered `OK`, then
`STATUS`, whose answer ends when NCCL closes the connection. NCCL listens on localhost:28028 unless
NCCL_RAS_ADDR says otherwise, so another machine reaches it only where NCCL_RAS_ADDR names an
address it can reach (0.0.0.0:28028, or the node's own).
"""

from __future__ import annotations

import json
import re
import socket
import time
from dataclasses import dataclass

DEFAULT_PORT = 28028
PROTOCOL = 2  # NCCL_RAS_CLIENT_PROTOCOL (src/ras/ras_internal.h)
_LOOPBACK = ("localhost", "127.", "::1", "[::1]")
_WILDCARD = ("", "0.0.0.0", "::", "[::]", "*")


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


# -- asking a node -------------------------------------------------------------------------
@dataclass(frozen=True)
class RasAnswer:
    """A query's outcome: the report, or why there is none."""

    address: str  # host:port asked (or that would have been)
    report: RasReport | None = None
    reason: str | None = None  # why there is no report
    text: str = ""  # NCCL's answer as it came


def address(node: str, ras_addr: str | None = None) -> tuple[str, int, str | None]:
    """Where to ask `node`'s RAS: (host, port, why it cannot be reached from elsewhere or None).
    `ras_addr` is NCCL_RAS_ADDR as the workers have it (host:port, [v6]:port); unset, NCCL
    listens on localhost:28028."""
    given = (ras_addr or "localhost").strip()
    host, port = given, DEFAULT_PORT
    if given.startswith("["):
        host, _, rest = given[1:].partition("]")
        port = int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else DEFAULT_PORT
    elif given.count(":") == 1:
        host, _, p = given.partition(":")
        port = int(p) if p.isdigit() else DEFAULT_PORT
    if host in _WILDCARD:
        return node, port, None
    if host.startswith(_LOOPBACK) and not node.startswith(_LOOPBACK):
        why = "NCCL RAS listens on localhost only (set NCCL_RAS_ADDR=0.0.0.0:28028 on the workers to reach it)"
        return node, port, why
    return host, port, None


def query(node: str, ras_addr: str | None = None, timeout_s: float = 5.0, fmt: str = "text") -> RasAnswer:
    """Ask `node`'s RAS for the job's status. Every step waits at most what is left of `timeout_s`;
    RAS itself is told to wait at most half of it for the job's other processes."""
    host, port, unreachable = address(node, ras_addr)
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if unreachable:
        return RasAnswer(where, reason=unreachable)
    deadline = time.monotonic() + timeout_s
    try:
        with socket.create_connection((host, port), timeout=max(0.05, timeout_s)) as sock:
            reader = _Reader(sock, deadline)
            reader.ask(f"CLIENT PROTOCOL {PROTOCOL}\n")
            hello = reader.line()
            if not hello.upper().startswith("SERVER PROTOCOL"):
                return RasAnswer(where, reason=f"not NCCL RAS: it answered {hello.strip()[:60]!r}")
            for command in (f"TIMEOUT {max(1, int(timeout_s / 2))}\n", *(["SET FORMAT json\n"] if fmt == "json" else [])):
                reader.ask(command)
                said = reader.line()
                if said.strip().upper() != "OK":
                    return RasAnswer(where, reason=f"{command.strip()} refused: {said.strip()[:80]!r}")
            reader.ask("STATUS\n")
            text = reader.rest()
    except TimeoutError:
        return RasAnswer(where, reason=f"no answer within {timeout_s:g}s")
    except OSError as e:
        return RasAnswer(where, reason=e.strerror or type(e).__name__)
    try:
        return RasAnswer(where, parse(text), text=text)
    except (ValueError, KeyError, TypeError, AttributeError) as e:  # AttributeError: an entry not an object
        return RasAnswer(where, reason=f"unreadable answer ({type(e).__name__}: {e})", text=text)


class _Reader:
    """Lines and the rest of a socket's stream, each read before `deadline` (else TimeoutError)."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock, self.deadline, self.buf = sock, deadline, b""

    def ask(self, command: str) -> None:
        self._wait()
        self.sock.sendall(command.encode())

    def line(self) -> str:
        while b"\n" not in self.buf and self._recv():
            pass
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode(errors="replace")

    def rest(self) -> str:
        while self._recv():
            pass
        return self.buf.decode(errors="replace")

    def _recv(self) -> bool:
        self._wait()
        data = self.sock.recv(65536)
        self.buf += data
        return bool(data)

    def _wait(self) -> None:
        if (left := self.deadline - time.monotonic()) <= 0:
            raise TimeoutError
        self.sock.settimeout(left)


REUSE_S = 30.0  # an answer this recent serves every group that times out after it (RAS speaks for the job)


def hang_note(nodes: list[str], pids: set[int], ras_addr: str | None, timeout_s: float = 5.0,
              recent: dict | None = None) -> str:
    """For a group that passed its deadline: "NCCL RAS ...: ..." as the first of `nodes` that answers
    tells it (only the entries of the group's processes, `pids`), or why none answered. Any node of
    the job answers for all of it; the nodes are tried in order within one `timeout_s`. `recent`
    (the caller's, kept between calls) holds the last answer: within REUSE_S it serves the next
    group at once, so k groups timing out together cost one query, not k."""
    if recent is not None and (kept := recent.get(ras_addr)) and time.monotonic() - kept[0] < REUSE_S:
        return f"NCCL RAS ({kept[1].address}): {kept[1].report.summary(pids)}"
    deadline = time.monotonic() + timeout_s
    reasons = []
    for node in dict.fromkeys(nodes):
        left = deadline - time.monotonic()
        if left <= 0.05:
            break
        answer = query(node, ras_addr, left)
        if answer.report is not None:
            if recent is not None:
                recent[ras_addr] = (time.monotonic(), answer)
            return f"NCCL RAS ({answer.address}): {answer.report.summary(pids)}"
        reasons.append(f"{answer.address}: {answer.reason}")
        if answer.reason and answer.reason.startswith("NCCL RAS listens on localhost"):
            break  # the same for every node
    return "NCCL RAS: no answer (" + "; ".join(reasons or ["no time left"]) + ")"
