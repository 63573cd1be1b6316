"""Can the nodes open the connections the collectives open? NCCL's and gloo's sockets listen on
ephemeral ports of the interface the node's IP is on and their peers connect to them; a firewall
or security group that drops those connections hangs every group that needs them until its
deadline. Here every node listens on an ephemeral port of its IP, and nodes connect to each other
as a plan says (every ordered pair at small N; at large N a ring both ways and a few random peers),
each attempt bounded by a timeout, all at once: a blocked node is named in seconds.

`listen` and `connect_all` run on the nodes (in a worker of the run, or an agent of `doctor`);
`plan` and `verdicts` are pure.
"""

from __future__ import annotations

import random
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

from orchestrator.doctor.checks import FAIL, OK, WARN, Check

ALL_PAIRS_UP_TO = 16  # nodes: every ordered pair (240 attempts at 16, all at once)
RANDOM_PEERS = 3  # beyond: a ring both ways and this many random peers per node
CONNECT_TIMEOUT_S = 3.0


def listen(holder, ip: str) -> int:
    """Listen on an ephemeral port of `ip` (as the collectives' sockets do), accepting and closing
    every connection, for as long as `holder` (the worker or agent object) lives. Returns the port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((ip, 0))
    sock.listen(256)

    def serve() -> None:
        while True:
            try:
                conn, _ = sock.accept()
                conn.close()
            except OSError:
                return

    threading.Thread(target=serve, name="collbench-doctor-listen", daemon=True).start()
    holder._collbench_listener = sock  # closed with the process (or by `close`)
    return sock.getsockname()[1]


def close(holder) -> None:
    sock = getattr(holder, "_collbench_listener", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread: close alone leaves it listening
        except OSError:
            pass
        sock.close()
        holder._collbench_listener = None


def connect_all(holder, source_ip: str, targets: list[tuple[str, int]], timeout_s: float = CONNECT_TIMEOUT_S
                ) -> list[str | None]:
    """Connect from `source_ip` to every (ip, port) at once; per target None (connected) or why not."""
    def one(target: tuple[str, int]) -> str | None:
        try:
            with socket.create_connection(target, timeout=timeout_s, source_address=(source_ip, 0)):
                return None
        except TimeoutError:
            return f"no answer in {timeout_s:g}s (dropped)"
        except ConnectionRefusedError:
            return "refused"
        except OSError as e:
            return (e.strerror or type(e).__name__).lower()

    if not targets:
        return []
    with ThreadPoolExecutor(max_workers=min(64, len(targets))) as pool:
        return list(pool.map(one, targets))


def plan(n: int, seed: int = 0) -> list[tuple[int, int]]:
    """Ordered (source, target) node pairs to try: every one up to ALL_PAIRS_UP_TO nodes, else each
    node to its ring neighbours both ways and to RANDOM_PEERS random others (every node is tried
    from at least 2 + RANDOM_PEERS sources on average)."""
    if n <= ALL_PAIRS_UP_TO:
        return [(a, b) for a in range(n) for b in range(n) if a != b]
    rng = random.Random(seed)
    pairs = set()
    for a in range(n):
        pairs.update({(a, (a + 1) % n), (a, (a - 1) % n)})
        for b in rng.sample([x for x in range(n) if x != a], RANDOM_PEERS):
            pairs.add((a, b))
    return sorted(pairs)


def verdicts(ips: list[str], attempts: dict[tuple[int, int], str | None]) -> tuple[Check, dict[str, list[Check]]]:
    """From every attempt's outcome (None: connected), the cluster's reachability check and per node
    what is wrong with it: a node no peer reached while it reached others is blocked inbound (a
    firewall on its ephemeral ports); one that reached no peer while others reached it, outbound;
    failures between nodes that are fine otherwise are named as pairs."""
    n = len(ips)
    inbound_ok = [0] * n
    inbound_tried = [0] * n
    outbound_ok = [0] * n
    outbound_tried = [0] * n
    for (a, b), error in attempts.items():
        outbound_tried[a] += 1
        inbound_tried[b] += 1
        if error is None:
            outbound_ok[a] += 1
            inbound_ok[b] += 1
    per_node: dict[str, list[Check]] = {ip: [] for ip in ips}
    culprits = set()
    for i, ip in enumerate(ips):
        why = sorted({e for (a, b), e in attempts.items() if b == i and e})
        if inbound_tried[i] and not inbound_ok[i] and outbound_ok[i]:
            culprits.add(i)
            per_node[ip].append(Check("reachable", FAIL, f"no peer could connect to it ({inbound_tried[i]} tried: "
                                      f"{', '.join(why)}); it connects to {outbound_ok[i]} of {outbound_tried[i]}",
                                      "a firewall or security group blocks inbound TCP to its ephemeral ports "
                                      "(NCCL and gloo listen there): allow TCP between the nodes on every port"))
        elif outbound_tried[i] and not outbound_ok[i] and inbound_ok[i]:
            culprits.add(i)
            per_node[ip].append(Check("reachable", FAIL, f"it could connect to no peer ({outbound_tried[i]} tried); "
                                      f"{inbound_ok[i]} peers connect to it", "outbound TCP from this node is blocked: "
                                      "allow TCP between the nodes on every port"))
        elif inbound_tried[i] and not inbound_ok[i] and not outbound_ok[i]:
            culprits.add(i)
            per_node[ip].append(Check("reachable", FAIL, "no connection in or out", "is the node on the same network?"))
    pairs = sorted({tuple(sorted((a, b))) for (a, b), e in attempts.items()
                    if e and a not in culprits and b not in culprits})
    for a, b in pairs:
        for i, j in ((a, b), (b, a)):
            per_node[ips[i]].append(Check("reachable", WARN, f"no connection with {ips[j]}: "
                                          f"{attempts.get((i, j)) or attempts.get((j, i))}",
                                          "a rule between these two nodes blocks TCP; the groups they share will hang"))
    failed = sum(1 for e in attempts.values() if e)
    if not failed:
        cluster = Check("reachable", OK, f"{len(attempts)} connection(s) between {n} node(s), every one opened")
    else:
        named = ", ".join(ips[i] for i in sorted(culprits)) or "none alone"
        cluster = Check("reachable", FAIL if culprits else WARN,
                        f"{failed} of {len(attempts)} connection(s) failed; blocked node(s): {named}"
                        + (f"; {len(pairs)} pair(s) blocked" if pairs else ""),
                        "collective groups that need these connections hang until their deadline")
    return cluster, per_node
