"""Asking NCCL's RAS service (NCCL 2.24+) what is missing from a job: `query` asks one node's RAS
socket over its documented text protocol (every wait bounded), and `hang_note` says it for a group
that passed its deadline; its answer is read by execution.ras_format (text or JSON).

The protocol, from NCCL's src/ras/client.cc: `CLIENT PROTOCOL 2` answered by `SERVER PROTOCOL <n>`,
`TIMEOUT <s>` and `SET FORMAT json` each answered `OK`, then `STATUS`, whose answer ends when NCCL
closes the connection. NCCL listens on localhost:28028 unless NCCL_RAS_ADDR says otherwise, so
another machine reaches it only where NCCL_RAS_ADDR names an address it can reach (0.0.0.0:28028,
or the node's own).
"""
from __future__ import annotations

import socket
import time
from dataclasses import dataclass

from orchestrator.execution.ras_format import RasProcess, RasRank, RasReport, parse

__all__ = ["RasAnswer", "RasProcess", "RasRank", "RasReport", "address", "hang_note", "parse", "query"]

DEFAULT_PORT = 28028
PROTOCOL = 2  # NCCL_RAS_CLIENT_PROTOCOL (src/ras/ras_internal.h)
_LOOPBACK = ("localhost", "127.", "::1", "[::1]")
_WILDCARD = ("", "0.0.0.0", "::", "[::]", "*")


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
    RAS itself is told to wait at most half of it for the job's other processes. JSON where RAS
    refuses it (NCCL before 2.28.7): its text, asked again (text mode crashed jobs whose
    communicators come and go, as a sweep's do: NCCL issue 2346; JSON avoids it)."""
    host, port, unreachable = address(node, ras_addr)
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if unreachable:
        return RasAnswer(where, reason=unreachable)
    deadline, text = time.monotonic() + timeout_s, None
    try:
        with socket.create_connection((host, port), timeout=max(0.05, timeout_s)) as sock:
            reader = _Reader(sock, deadline)
            reader.ask(f"CLIENT PROTOCOL {PROTOCOL}\n")
            hello = reader.line()
            if not hello.upper().startswith("SERVER PROTOCOL"):
                return RasAnswer(where, reason=f"not NCCL RAS: it answered {hello.strip()[:60]!r}")
            json_too = ["SET FORMAT json\n"] if fmt == "json" else []
            for command in (f"TIMEOUT {max(1, int(timeout_s / 2))}\n", *json_too):
                reader.ask(command)
                said = reader.line().strip()
                if said.upper() != "OK" and command.startswith("SET FORMAT"):
                    break  # asked again for text, once this connection is closed
                if said.upper() != "OK":
                    return RasAnswer(where, reason=f"{command.strip()} refused: {said[:80]!r}")
            else:
                reader.ask("STATUS\n")
                text = reader.rest()
    except TimeoutError:
        return RasAnswer(where, reason=f"no answer within {timeout_s:g}s")
    except OSError as e:
        return RasAnswer(where, reason=e.strerror or type(e).__name__)
    if text is None:  # JSON refused: its text, on a new connection, in the time left
        left = deadline - time.monotonic()
        return query(node, ras_addr, left) if left > 0.05 else RasAnswer(where, reason="SET FORMAT json refused, "
                                                                          "and no time left to ask for its text")
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
    group at once, so k groups timing out together cost one query, not k. JSON: NCCL issue 2346."""
    if recent is not None and (kept := recent.get(ras_addr)) and time.monotonic() - kept[0] < REUSE_S:
        return f"NCCL RAS ({kept[1].address}): {kept[1].report.summary(pids)}"
    deadline = time.monotonic() + timeout_s
    reasons = []
    for node in dict.fromkeys(nodes):
        left = deadline - time.monotonic()
        if left <= 0.05:
            break
        answer = query(node, ras_addr, left, fmt="json")
        if answer.report is not None:
            if recent is not None:
                recent[ras_addr] = (time.monotonic(), answer)
            return f"NCCL RAS ({answer.address}): {answer.report.summary(pids)}"
        reasons.append(f"{answer.address}: {answer.reason}")
        if answer.reason and answer.reason.startswith("NCCL RAS listens on localhost"):
            break  # the same for every node
    return "NCCL RAS: no answer (" + "; ".join(reasons or ["no time left"]) + ")"
