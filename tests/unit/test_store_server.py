"""The run's rendezvous server (execution.store_server) against torch's own TCPStore client: every
query a process group sends, answered as torch's server answers it; waits, timeouts, broken
clients. Every run's groups form through it too (tests/integration: each run's rows)."""

from __future__ import annotations

import socket
import struct
import threading
import time
from datetime import timedelta

import pytest

from orchestrator.execution import store_server
from orchestrator.execution.store_server import StoreServer

dist = pytest.importorskip("torch.distributed")


@pytest.fixture()
def server():
    srv = StoreServer("127.0.0.1")
    yield srv
    srv.close()


def client(srv: StoreServer, timeout_s: float = 5.0):
    return dist.TCPStore("127.0.0.1", srv.port, is_master=False, timeout=timedelta(seconds=timeout_s))


def test_every_query_a_process_group_sends_is_answered_as_torchs_server_does(server):
    c = client(server)
    c.set("a", b"1")
    assert c.get("a") == b"1"
    assert (c.add("n", 3), c.add("n", -1), c.get("n")) == (3, 2, b"2")  # a counter is its decimal text
    assert c.check(["a", "n"]) and not c.check(["a", "missing"])
    # compare_set: set where the key is absent and nothing was expected, or where it holds the expected
    assert c.compare_set("cs", b"", b"x") == b"x"
    assert c.compare_set("cs", b"other", b"y") == b"x"
    assert c.compare_set("cs", b"x", b"z") == b"z"
    assert c.compare_set("absent", b"q", b"r") == b"q" and not c.check(["absent"])
    assert c.num_keys() == 3
    assert c.delete_key("a") and not c.delete_key("a") and c.num_keys() == 2
    c.append("log", b"ab")
    c.append("log", b"cd")
    assert c.get("log") == b"abcd"
    c.multi_set(["m1", "m2"], [b"1", b"22"])
    assert c.multi_get(["m2", "m1"]) == [b"22", b"1"]
    big = bytes(range(256)) * 4096  # 1 MiB: arrives in many reads
    c.set("big", big)
    assert c.get("big") == big
    # a group's prefix, as the workers use it
    dist.PrefixStore("run/g0", c).set("rank0", b"addr")
    assert c.get("run/g0/rank0") == b"addr"


def test_a_wait_ends_when_another_client_sets_its_keys_and_times_out_cleanly_when_none_does(server):
    waiter, setter = client(server), client(server)
    threading.Timer(0.3, lambda: (setter.set("k1", b"1"), setter.set("k2", b"2"))).start()
    started = time.monotonic()
    waiter.wait(["k1", "k2"])
    assert 0.25 < time.monotonic() - started < 4
    waiter.set_timeout(timedelta(seconds=0.5))
    with pytest.raises(dist.DistStoreError, match="timeout"):
        waiter.wait(["never"])
    # the cancelled wait leaves the connection in step: the next answers are this client's own
    setter.set("never", b"late")
    assert waiter.get("never") == b"late" and waiter.add("c", 1) == 1


def test_a_broken_client_is_dropped_and_the_others_are_served(server):
    healthy = client(server)
    healthy.set("x", b"1")
    for junk in (b"\x01garbage", struct.pack("<BI", store_server.VALIDATE, 0xDEADBEEF)):
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
            s.sendall(junk)
            assert s.recv(1) == b""  # closed by the server
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:  # a query of 2^40 keys
        s.sendall(struct.pack("<BI", store_server.VALIDATE, store_server.MAGIC)
                  + struct.pack("<BQ", store_server.CHECK, 1 << 40))
        assert s.recv(1) == b""
    assert healthy.get("x") == b"1"


def test_a_query_that_arrives_a_byte_at_a_time_is_read_whole(server):
    key, value = b"/slow", b"value"  # torch's client puts "/" before every key
    message = (struct.pack("<BI", store_server.VALIDATE, store_server.MAGIC)
               + struct.pack("<BQ", store_server.SET, len(key)) + key + struct.pack("<Q", len(value)) + value
               + struct.pack("<BI", store_server.PING, 77))
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(len(message)):
            s.sendall(message[i:i + 1])
            time.sleep(0.001)
        assert struct.unpack("<I", s.recv(4))[0] == 77
    assert client(server).get("slow") == b"value"


def test_close_stops_the_thread_and_frees_the_port():
    srv = StoreServer("127.0.0.1")
    port = srv.port
    client(srv).set("a", b"1")
    srv.close()
    srv.close()  # twice: the pool's shutdown may follow a failed start's
    assert not srv._thread.is_alive()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
