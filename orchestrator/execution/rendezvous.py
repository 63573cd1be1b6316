"""The run's rendezvous store: one TCPStore in the driver for every group of the run.

Each worker connects to it once, when it starts, and every group forms through its own key prefix
(`<run_id>/<group_id>`), so forming a group opens no new store and no new TCP connection. A store
per group (on its rank 0) cost each round a connection per rank, and c10d looks up the host name
of every connecting peer: on machines whose resolver is slow, concurrent lookups stall for the
resolver's 5 s retry (measured: 7 of 15 pairwise rounds on 16 fake nodes took 5 s instead of
0.1 s; benchmarks/rounds.py). The store lives in the driver's process, on the address by which the
driver reaches the Ray head, which every worker can reach.
"""

from __future__ import annotations

import socket

from orchestrator.execution.store_server import StoreServer


def reachable_ip(gcs_address: str) -> str:
    """This machine's address on the route to the Ray head (the head's own when it is here)."""
    host, _, port = gcs_address.rpartition(":")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, int(port or 6379)))  # UDP: no packet is sent
        return s.getsockname()[0]


class RunStore:
    """The run's store, served by this process (execution.store_server: torch's wire protocol,
    without importing torch here); `address` is what workers connect to with torch's client."""

    def __init__(self, ip: str) -> None:
        self._server = StoreServer(ip)
        self.address = (ip, self._server.port)

    def close(self) -> None:
        self._server.close()
