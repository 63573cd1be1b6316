"""A server for torch.distributed's TCPStore clients, in Python: the run's rendezvous without torch.

The driver serves the run's rendezvous store (execution.rendezvous) and measures nothing itself, yet
serving it with torch's own `TCPStore(is_master=True)` cost every command that starts workers an
import of torch: 2 s of CPU on this 2-core machine, a third of a small run's whole cost (driver,
Ray, workers; benchmarks/data/suite_times.jsonl's plain tier was bound by CPU). The workers keep
torch's client (`dist.TCPStore(..., is_master=False)`) and speak its wire protocol to this server,
which follows torch's libuv server (torch/csrc/distributed/c10d/TCPStoreLibUvBackend.cpp):

- a connection's first message is VALIDATE with the magic number; anything else drops it;
- a query is one byte (QueryType's order), then its arguments: a string or a byte payload is a
  u64 length and its bytes; a count is u64; an ADD's value i64; all little-endian;
- WAIT answers STOP_WAITING once every key it names is set, or WAIT_CANCELED after a CANCEL_WAIT
  (the client's own timeout); SET, ADD, APPEND, MULTI_SET and a COMPARE_SET that sets wake waiters;
- the queue queries and later ones (QUEUE_*, LIST_KEYS, BARRIER) are not served: no process group
  sends them; a client that does is dropped and the query named in the server's log.

One thread, one selector: every connection's bytes are buffered until a whole query has arrived,
so a slow or silent client holds nothing up (torch's server does the same with libuv)."""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import struct
import threading

log = logging.getLogger(__name__)

MAGIC = 0x3C85F7CE
(VALIDATE, SET, COMPARE_SET, GET, ADD, CHECK, WAIT, GETNUMKEYS, DELETE_KEY, APPEND, MULTI_GET, MULTI_SET,
 CANCEL_WAIT, PING) = range(14)
READY, NOT_READY = 0, 1  # CheckResponseType
STOP_WAITING, WAIT_CANCELED = 0, 1  # WaitResponseType
# torch's own bounds on what one query may carry (TCPStoreLibUvBackend.cpp)
MAX_KEY_COUNT, MAX_STRING_LEN, MAX_PAYLOAD_LEN = 128 * 1024, 8 * 1024, 8 * 1024 * 1024


class _Incomplete(Exception):
    """The query has not wholly arrived: wait for more bytes."""


class _Refused(Exception):
    """The client broke the protocol: drop it."""


class _Reader:
    def __init__(self, buf: bytearray) -> None:
        self.buf, self.at = buf, 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.buf):
            raise _Incomplete
        out = bytes(self.buf[self.at:self.at + n])
        self.at += n
        return out

    def value(self, fmt: str) -> int:
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt)))[0]

    def count(self) -> int:
        n = self.value("Q")
        if n > MAX_KEY_COUNT:
            raise _Refused(f"{n} keys in one query (at most {MAX_KEY_COUNT})")
        return n

    def sized(self, limit: int) -> bytes:
        n = self.value("Q")
        if n > limit:
            raise _Refused(f"{n} bytes in one field (at most {limit})")
        return self.take(n)

    def key(self) -> str:
        return self.sized(MAX_STRING_LEN).decode("utf-8", "surrogateescape")

    def payload(self) -> bytes:
        return self.sized(MAX_PAYLOAD_LEN)


def _vector(data: bytes) -> bytes:
    return struct.pack("<Q", len(data)) + data


class _Client:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.inbox, self.outbox = bytearray(), bytearray()
        self.validated = False
        self.awaited: set[str] = set()  # the keys its WAIT still waits for


class StoreServer:
    """Serves TCPStore clients on (ip, port) from a daemon thread; port 0 picks a free one."""

    def __init__(self, ip: str, port: int = 0) -> None:
        self.data: dict[str, bytes] = {}
        self._waiters: dict[str, set[_Client]] = {}
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((ip, port))
        self._listener.listen(socket.SOMAXCONN)
        self._listener.setblocking(False)
        self.port = self._listener.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, name="collbench-store", daemon=True)
        self._thread.start()

    def close(self, timeout_s: float = 5.0) -> None:
        self._stopping = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._thread.join(timeout_s)

    # -- the loop -----------------------------------------------------------------------------
    def _serve(self) -> None:
        try:
            while not self._stopping:
                for key, events in self._selector.select():
                    if key.fileobj is self._listener:
                        self._accept()
                    elif key.fileobj is self._wake_r:
                        continue
                    elif events & selectors.EVENT_READ:
                        self._read(key.data)
                    if key.data is not None and events & selectors.EVENT_WRITE:
                        self._flush(key.data)
        finally:
            for key in list(self._selector.get_map().values()):
                with contextlib.suppress(OSError):
                    key.fileobj.close()
            self._selector.close()
            self._wake_w.close()

    def _accept(self) -> None:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while True:
                sock, _ = self._listener.accept()
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._selector.register(sock, selectors.EVENT_READ, _Client(sock))

    def _read(self, client: _Client) -> None:
        try:
            chunk = client.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(client)
            return
        client.inbox += chunk
        reader = _Reader(client.inbox)
        try:
            while reader.at < len(client.inbox):
                start = reader.at
                try:
                    self._query(client, reader)
                except _Incomplete:
                    reader.at = start
                    break
        except _Refused as e:
            log.warning("rendezvous store: dropped a client: %s", e)
            self._drop(client)
            return
        except Exception:  # noqa: BLE001 - one client's query must never stop the store for every other
            log.exception("rendezvous store: dropped a client after an error in its query")
            self._drop(client)
            return
        del client.inbox[:reader.at]
        self._flush(client)

    def _flush(self, client: _Client) -> None:
        if client.sock.fileno() < 0:
            return
        if client.outbox:
            try:
                sent = client.sock.send(client.outbox)
                del client.outbox[:sent]
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                self._drop(client)
                return
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if client.outbox else 0)
        self._selector.modify(client.sock, events, client)

    def _drop(self, client: _Client) -> None:
        self._unwait(client)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(client.sock)
        client.sock.close()

    # -- queries ------------------------------------------------------------------------------
    def _query(self, client: _Client, r: _Reader) -> None:
        kind = r.value("B")
        if not client.validated:
            if kind != VALIDATE or r.value("I") != MAGIC:
                raise _Refused("its first message is not torch's validation")
            client.validated = True
            return
        out = client.outbox
        if kind == PING:
            out += struct.pack("<I", r.value("I"))
        elif kind == SET:
            self._set(r.key(), r.payload())
        elif kind == COMPARE_SET:
            key, expected, new = r.key(), r.payload(), r.payload()
            current = self.data.get(key)
            if (current is None and not expected) or current == expected:
                self._set(key, new)
                current = new
            out += _vector(expected if current is None else current)
        elif kind == GET:
            out += _vector(self.data.get(r.key(), b""))
        elif kind == ADD:
            key, amount = r.key(), r.value("q")
            try:
                total = int(self.data.get(key, b"0")) + amount
            except ValueError:
                raise _Refused(f"ADD to key {key!r}, whose value is not a number") from None
            self._set(key, str(total).encode())
            out += struct.pack("<q", total)
        elif kind == CHECK:
            keys = [r.key() for _ in range(r.count())]
            out += struct.pack("<B", READY if all(k in self.data for k in keys) else NOT_READY)
        elif kind == WAIT:
            missing = {k for k in (r.key() for _ in range(r.count())) if k not in self.data}
            if not missing:
                out += struct.pack("<B", STOP_WAITING)
            client.awaited = missing
            for key in missing:
                self._waiters.setdefault(key, set()).add(client)
        elif kind == GETNUMKEYS:
            out += struct.pack("<q", len(self.data))
        elif kind == DELETE_KEY:
            out += struct.pack("<q", int(self.data.pop(r.key(), None) is not None))
        elif kind == APPEND:
            key, data = r.key(), r.payload()
            self._set(key, self.data.get(key, b"") + data)
        elif kind == MULTI_GET:
            for key in [r.key() for _ in range(r.count())]:
                out += _vector(self.data.get(key, b""))
        elif kind == MULTI_SET:
            for key, data in [(r.key(), r.payload()) for _ in range(r.count())]:
                self._set(key, data)
        elif kind == CANCEL_WAIT:
            self._unwait(client)
            out += struct.pack("<B", WAIT_CANCELED)
        else:
            raise _Refused(f"query {kind} is not served here (torch's QueryType; queues, list_keys, barrier)")

    def _set(self, key: str, data: bytes) -> None:
        self.data[key] = data
        for waiter in self._waiters.pop(key, ()):
            waiter.awaited.discard(key)
            if not waiter.awaited:
                waiter.outbox += struct.pack("<B", STOP_WAITING)
                if waiter.sock.fileno() >= 0:
                    self._selector.modify(waiter.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, waiter)

    def _unwait(self, client: _Client) -> None:
        for key in client.awaited:
            waiting = self._waiters.get(key)
            if waiting is not None:
                waiting.discard(client)
                if not waiting:
                    del self._waiters[key]
        client.awaited = set()
