"""Joining a Ray cluster, or starting an embedded one when none is named.

A named cluster is checked before Ray is asked to join it: Ray alone retries a port where nothing
listens, or one that accepts and never answers, for many minutes, printing warnings. Here the
address must accept a connection and answer as a gRPC server (Ray's GCS) within the connect
timeout ($COLLBENCH_CONNECT_TIMEOUT_S, default 30 s), or the command ends with one line naming it;
ray.init then makes one attempt instead of twenty, and a failure of it is one line too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import ray

from orchestrator.errors import ConnectTimeout, UsageError, first_line
from orchestrator.lab.raynodes import MEASURING_NICENESS
from orchestrator.scheduler import aliases, nodes_to_wait_for, not_joined
from orchestrator.timeouts import connect_timeout_s

_GCS_HINT = "collbench joins the cluster's GCS address (HOST:6379)"


@dataclass(frozen=True)
class Connection:
    """What a run joined: said as `where`; `owned` when collbench called ray.init (and so ends it)."""

    where: str
    owned: bool = True


def connect(address: str | None, verbose: bool = False) -> Connection:
    """Join `address` (or $RAY_ADDRESS); otherwise start a private local instance. Workers' log
    lines stay in Ray's session logs unless `verbose` (_ray_logs). A process whose Ray is already
    initialised (a caller of the Python API) has its session used as it is, never shut down."""
    if ray.is_initialized():
        return Connection(f"the caller's Ray session ({ray.get_runtime_context().gcs_address})", owned=False)
    return Connection(_join_or_start(address, verbose))


def _ray_logs(verbose: bool) -> dict:
    """ray.init's logging: warnings, workers' output in their logs; or (verbose) INFO, on the terminal."""
    return {"logging_level": logging.INFO if verbose else logging.WARNING, "log_to_driver": verbose}


def _join_or_start(address: str | None, verbose: bool = False) -> str:
    where = f"--address {address}" if address else f"$RAY_ADDRESS {os.environ.get('RAY_ADDRESS')}"
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        timeout_s = connect_timeout_s()
        deadline = time.monotonic() + timeout_s
        host_port = gcs_host_port(address, where)
        if host_port is None:  # auto, local: Ray finds (or starts) the instance itself
            ray.init(address=address, **_ray_logs(verbose))
        else:
            wait_for_gcs(*host_port, deadline, where, timeout_s)
            _join(address, deadline, where, timeout_s, verbose)
        return f"Ray cluster at {address}"
    # "local" always starts a new instance: never attach to another user's cluster by accident. Its
    # workers measure at nice 0, not Ray's 15 (lab.raynodes.MEASURING_NICENESS)
    os.environ.update({k: v for k, v in MEASURING_NICENESS.items() if k not in os.environ})
    # Ray (2.60 and later) logs a WARNING on every local start where it chose the token-auth mode
    # itself (on where a token exists, else off); for the run's own instance that is noise (issue 45)
    notice = logging.getLogger("ray._private.authentication.authentication_token_setup")
    level = notice.level
    notice.setLevel(logging.NOTSET if verbose else logging.ERROR)
    try:
        ray.init(address="local", include_dashboard=False, **_ray_logs(verbose))
    finally:
        notice.setLevel(level)
    return "embedded Ray instance"


def joined_nodes(spec, say: Callable[[str], None]):
    """The nodes that can hold a rank, once as many as the run waits for have joined (--wait-nodes,
    or a Slurm job's node count: a worker still starting must not shrink the sweep silently), up
    to --group-timeout; refused (UsageError, exit 2: the cluster is not the one the job allocated, as
    `--patterns pairwise` on one node is refused) naming those that joined where fewer did."""
    from orchestrator.sweep import inventory

    wanted, why = nodes_to_wait_for(spec.wait_nodes, dict(os.environ))
    inv = inventory.from_ray_nodes(ray.nodes(), spec.ranks_per_node)
    if len(inv.nodes) >= wanted:
        return inv
    say(f"collbench: waiting for {wanted} node(s) ({why}), up to {spec.group_timeout_s:g} s: {len(inv.nodes)} joined")
    deadline = time.monotonic() + spec.group_timeout_s
    while len(inv.nodes) < wanted and time.monotonic() < deadline:
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        before, inv = len(inv.nodes), inventory.from_ray_nodes(ray.nodes(), spec.ranks_per_node)
        if len(inv.nodes) != before:
            say(f"collbench: {len(inv.nodes)} of {wanted} node(s) joined")
    if len(inv.nodes) < wanted:
        joined = ", ".join(f"{n.hostname} ({n.ip})" for n in inv.nodes) or "none"
        missing = not_joined(os.environ, {n.hostname for n in inv.nodes}, {n.ip for n in inv.nodes})
        raise UsageError(f"{wanted} node(s) expected ({why}), {len(inv.nodes)} joined in {spec.group_timeout_s:g} s: "
                         f"{joined}{missing}; start the missing nodes' Ray, or give --wait-nodes {len(inv.nodes)} "
                         "to measure those")
    return inv


def disconnect(connection: Connection | None) -> None:
    if connection is not None and connection.owned and ray.is_initialized():
        ray.shutdown()


@contextlib.contextmanager
def joined_inventory(spec, domains: bool = False):
    """The cluster's nodes as `spec` selects them (address, ranks_per_node, nodes, exclude), while
    joined (for the block; a cluster collbench started is stopped after it, a caller's session kept).
    `domains`: with the NVLink domains of GPU nodes (nvidia-smi -q on every node)."""
    from orchestrator.sweep import inventory

    joined = connect(spec.address, spec.verbose)
    try:
        inv = inventory.select(inventory.from_ray_nodes(ray.nodes(), spec.ranks_per_node), spec.nodes, spec.exclude,
                               aliases(spec.nodes + spec.exclude, os.environ))
        if domains and inv.use_gpus:
            from orchestrator.execution import probe

            inv = inventory.with_domains(inv, probe.read_domains(inv))
        yield inv
    finally:
        disconnect(joined)


def gcs_host_port(address: str, where: str) -> tuple[str, int] | None:
    """(host, port) to check before joining; None for what Ray resolves itself (auto, local)."""
    if address.startswith(("http://", "https://")):
        raise UsageError(
            f"{where}: a Ray job-server (dashboard) address; collbench joins the cluster's GCS address "
            "(HOST:6379), or run it with `ray job submit -- collbench ...`, whose entrypoint gets the right address"
        )
    if address in ("auto", "local"):
        return None
    rest = address.removeprefix("ray://")  # Ray Client: its server's port
    host, sep, port = rest.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"{where}: expected HOST:PORT, the cluster's GCS address (such as 10.0.0.1:6379)")
    return host, int(port)


def wait_for_gcs(host: str, port: int, deadline: float, where: str, timeout_s: float) -> None:
    """Return once host:port accepts a TCP connection and answers as a gRPC server (Ray's GCS)
    does; retry refusals (a head still starting) until `deadline` (time.monotonic()), then
    UsageError."""
    while True:
        left_s = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=max(0.1, min(left_s, 5.0))) as sock:
                reason = _answer(sock, deadline, where)
                if reason is None:
                    return
        except socket.gaierror as e:
            raise UsageError(f"{where}: unknown host {host} ({e.strerror})") from None
        except ConnectionRefusedError:
            reason = "connection refused"
        except TimeoutError:
            reason = "timed out"
        except OSError as e:
            reason = (e.strerror or type(e).__name__).lower()
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            raise UsageError(f"{where}: no Ray cluster answered in {timeout_s:g} s ({reason})")
        time.sleep(min(1.0, left_s))


# A client's HTTP/2 preface and an empty SETTINGS frame; a gRPC server answers with its SETTINGS.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_H2_SETTINGS = 4


def _answer(sock: socket.socket, deadline: float, where: str) -> str | None:
    """None when the listener answers as a gRPC server; else why not (retried). Skipped under
    TLS (RAY_USE_TLS), where the server waits for a TLS handshake."""
    if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        return None
    sock.settimeout(max(0.1, deadline - time.monotonic()))
    sock.sendall(_H2_PREFACE)
    header = b""
    try:
        while len(header) < 9:
            chunk = sock.recv(9 - len(header))
            if not chunk:
                return "connection closed without an answer"
            header += chunk
    except TimeoutError:
        return "the port accepts connections but nothing answers"
    if header[3] != _H2_SETTINGS:
        said = header.decode("ascii", "replace")
        raise UsageError(f"{where}: answers, but not as a Ray cluster does (it said {said!r}); {_GCS_HINT}")
    return None


# What a failed join raises (AuthenticationError is a RayError; a bad token a ValueError).
_JOIN_ERRORS = (ConnectionError, RuntimeError, TimeoutError, ValueError, ray.exceptions.RayError)


def _join(address: str, deadline: float, where: str, timeout_s: float, verbose: bool = False) -> None:
    """ray.init(address), bounded by the deadline; Ray's warnings while it fails stay unprinted.

    ray.init runs in a daemon thread: a listener that speaks gRPC but is not a GCS can keep it
    waiting with no bound of its own. Past the deadline ConnectTimeout is raised, the thread left
    waiting (the command line then ends its process at once: errors.ConnectTimeout)."""
    # One attempt, not Ray's 20 (each waits ~40 s on a listener that does not answer as a GCS).
    # Ray reads its other waits (RAY_py_gcs_connect_timeout_s) when it is imported, too late here.
    outcome: list[BaseException | None] = []

    def init() -> None:
        try:
            ray.init(address=address, **_ray_logs(verbose))
            outcome.append(None)
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            outcome.append(e)

    with _env({"RAY_gcs_server_port_wait_time_s": "1"}), _stderr_held() as held:
        thread = threading.Thread(target=init, name="collbench-ray-init", daemon=True)
        thread.start()
        thread.join(max(1.0, deadline - time.monotonic()))
        error = outcome[0] if outcome else None
        if not outcome or isinstance(error, _JOIN_ERRORS):
            held.drop()
    if not outcome:
        raise ConnectTimeout(f"{where}: could not join a Ray cluster there in {timeout_s:g} s (no answer to ray.init); "
                             f"{_GCS_HINT}")
    if error is None:
        return
    if isinstance(error, _JOIN_ERRORS):
        tried_s = timeout_s - (deadline - time.monotonic())
        raise UsageError(f"{where}: could not join a Ray cluster there in {tried_s:.0f} s ({first_line(error)}); "
                         f"{_hint(error)}") from None
    raise error


def _hint(error: BaseException) -> str:
    chain = [error]
    while chain[-1].__cause__ or chain[-1].__context__:
        chain.append(chain[-1].__cause__ or chain[-1].__context__)
    if any("InvalidAuthToken" in str(e) or isinstance(e, ray.exceptions.AuthenticationError) for e in chain):
        return ("the cluster uses token authentication: set RAY_AUTH_MODE=token and give its token "
                "(~/.ray/auth_token, $RAY_AUTH_TOKEN or $RAY_AUTH_TOKEN_PATH)")
    return _GCS_HINT


@contextlib.contextmanager
def _env(values: dict[str, str]):
    """Set variables the user has not set, for the block."""
    added = {k: v for k, v in values.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


class _Held:
    """What was written to file descriptor 2 while held: passed on unless dropped."""

    def __init__(self) -> None:
        self.dropped = False

    def drop(self) -> None:
        self.dropped = True


@contextlib.contextmanager
def _stderr_held():
    """Hold what the process (Ray's C++ core included) writes to fd 2 during the block, and pass
    it on after, unless the block drops it (a failed join is said in one line)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as f:
        os.dup2(f.fileno(), 2)
        held = _Held()
        try:
            yield held
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            if not held.dropped:
                f.seek(0)
                # Ray's own SIGTERM handler is for the main thread; collbench sets its own.
                data = b"".join(line for line in f.readlines() if b"SIGTERM handler is not set" not in line)
                while data:
                    data = data[os.write(2, data):]
