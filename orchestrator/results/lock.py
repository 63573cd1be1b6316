"""One writer per run: an exclusive lock on a run, held by `collbench run` (and its --resume) from
before Ray starts until it ends, by every compaction of the run, and for a moment by a report that
marks the manifest of a driver killed outright (left_behind.py).

The lock lives beside the manifest, `<root>/_runs/<run_id>.lock` (readers skip names starting
with `_`), and holds its holder as JSON (host, pid, since, heartbeat, token), so a second writer is
refused in one line naming it.

Local outputs use flock(2): the kernel releases the lock when its holder dies, even by SIGKILL.
A holder deletes the file as it lets go; an acquirer checks that the file it locked is still the
one at the path (else it locked a deleted one and tries again). The descriptor is not inherited
(Python opens files non-inheritable), so the Ray processes an embedded run starts do not keep a
dead driver's lock. On NFS flock is emulated with fcntl locks and is as reliable as the server's
lock manager; a filesystem without locks makes acquiring fail with the OS error named.

Object stores (s3://, gs://) have no lock primitive that pyarrow exposes (no conditional put), so
the lock object is a lease: the holder rewrites its heartbeat every LEASE_S / 4 from a daemon
thread; an acquirer takes the lock over when the heartbeat is older than LEASE_S, or when the
holder is on this host and its pid is gone. Racing acquirers both write, wait SETTLE_S and read
back: the one whose token is there holds it. Limits: an acquirer slower than SETTLE_S between its
read and its write can overwrite a winner; host clocks must agree to well within LEASE_S; a holder
paused for longer than LEASE_S loses the lock and finds out at its next heartbeat (`lost`: the
taker, or Vanished where the lock object is gone). Enough for an accidental second resume, not
for hostile concurrency.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import errno
import fcntl
import json
import os
import socket
import threading
import time
import uuid

import pyarrow as pa
import pyarrow.fs as pafs

from orchestrator.errors import UsageError, first_line

LOCK_SUFFIX = ".lock"
LEASE_S = 60.0  # object stores: a heartbeat older than this is a dead holder's
SETTLE_S = 1.0  # object stores: how long racing acquirers wait before reading back who won
POLL_S = 0.2  # how often a waiting acquirer of an object-store lock tries again (each try is a request)
LOCAL_POLL_S = 0.05  # the most a waiting acquirer of a local lock sleeps between tries (a try is a syscall)
HOLDER_READ_S = 0.5  # how long a refused acquirer waits for a new holder to write its name


@dataclasses.dataclass(frozen=True)
class Holder:
    """Who holds a run's lock."""

    host: str
    pid: int
    since: dt.datetime
    heartbeat: dt.datetime
    token: str

    @staticmethod
    def me(token: str, since: dt.datetime | None = None) -> Holder:
        now = dt.datetime.now(dt.timezone.utc)
        return Holder(socket.gethostname(), os.getpid(), since or now.replace(microsecond=0), now, token)

    def to_json(self) -> bytes:
        record = dataclasses.asdict(self)
        record.update(since=self.since.isoformat(), heartbeat=self.heartbeat.isoformat())
        return json.dumps(record).encode()

    @staticmethod
    def from_json(data: bytes) -> Holder | None:
        """The holder written in a lock, or None for an empty or foreign one."""
        try:
            record = json.loads(data)
            return Holder(str(record["host"]), int(record["pid"]), dt.datetime.fromisoformat(record["since"]),
                          dt.datetime.fromisoformat(record["heartbeat"]), str(record["token"]))
        except (ValueError, TypeError, KeyError, AttributeError):
            return None

    def describe(self) -> str:
        return f"host {self.host} pid {self.pid} since {self.since.isoformat()}"

    def gone(self) -> bool:
        """True when the holder is a process of this host that no longer runs."""
        return self.host == socket.gethostname() and not _pid_alive(self.pid)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


def _refused(run_id: str, where: str, holder: Holder | None) -> UsageError:
    who = holder.describe() if holder else "another process (it has not written its name yet)"
    return UsageError(f"run {run_id} in {where} is being written by {who}; one run or --resume writes a run at a "
                      "time: wait for it to end, or stop it")


class LocalLock:
    """flock(2) on `<root>/_runs/<run_id>.lock`; see the module's docstring."""

    def __init__(self, root: str, manifest_dir: str, run_id: str, where: str) -> None:
        self.path = os.path.join(root, manifest_dir, run_id + LOCK_SUFFIX)
        self.run_id, self.where = run_id, where
        self._fd: int | None = None
        self._created: list[str] = []

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, wait_s: float = 0.0) -> None:
        """Take the lock; refuse (UsageError naming the holder) if another holds it after wait_s."""
        deadline, pause_s = time.monotonic() + wait_s, 0.01
        self._created = []
        while True:
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = self._holder(fd)
                os.close(fd)
                if time.monotonic() >= deadline:
                    raise _refused(self.run_id, self.where, holder) from None
                time.sleep(pause_s)
                pause_s = min(2 * pause_s, LOCAL_POLL_S)
                continue
            except OSError as e:
                os.close(fd)
                raise UsageError(f"{self.path}: cannot lock it ({first_line(e)})") from None
            if self._still_there(fd):
                break
            os.close(fd)  # its holder deleted it as it let go: lock the file now at the path
        os.ftruncate(fd, 0)
        os.pwrite(fd, Holder.me(uuid.uuid4().hex).to_json(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        try:  # deleted while still locked, so no acquirer can lock this file and think it current
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        for directory in reversed(self._created):  # an output this run created only to lock it
            try:
                os.rmdir(directory)
            except OSError:
                break
        self._created = []
        os.close(self._fd)
        self._fd = None

    def _open(self) -> int:
        directory = os.path.dirname(self.path)
        for _ in range(100):  # a releaser may remove an empty folder between our makedirs and open
            missing = []
            probe = directory
            while not os.path.exists(probe):
                missing.append(probe)
                probe = os.path.dirname(probe)
            try:
                os.makedirs(directory, exist_ok=True)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except FileNotFoundError:
                continue
            except OSError as e:
                raise UsageError(f"{self.path}: cannot create the run's lock ({first_line(e)})") from None
            if not self._created:
                self._created = list(reversed(missing))
            return fd
        raise UsageError(f"{self.path}: its folder keeps disappearing")

    def _still_there(self, fd: int) -> bool:
        try:
            st, mine = os.stat(self.path), os.fstat(fd)
        except FileNotFoundError:
            return False
        return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)

    def _holder(self, fd: int) -> Holder | None:
        """The holder's name; a holder that has just taken the lock may not have written it yet, or
        the file may still name a dead predecessor: wait a little for the current one."""
        deadline = time.monotonic() + HOLDER_READ_S
        while True:
            holder = Holder.from_json(os.pread(fd, 4096, 0))
            if (holder is not None and not holder.gone()) or time.monotonic() >= deadline:
                return holder
            time.sleep(0.05)


@dataclasses.dataclass(frozen=True)
class Vanished:
    """What a heartbeat found where its lock object was: nothing (deleted, or lost by the store)."""


class ObjectLock:
    """A lease object on an object store; see the module's docstring for its limits."""

    def __init__(self, fs: pafs.FileSystem, root: str, manifest_dir: str, run_id: str, where: str) -> None:
        self.fs, self.path = fs, f"{root}/{manifest_dir}/{run_id}{LOCK_SUFFIX}"
        self.run_id, self.where = run_id, where
        self.lost: Holder | Vanished | None = None  # set when another writer took the lock over, or it vanished
        self._me: Holder | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def held(self) -> bool:
        return self._me is not None

    def acquire(self, wait_s: float = 0.0) -> None:
        deadline = time.monotonic() + wait_s
        while (me := self._try()) is None:
            if time.monotonic() >= deadline:
                raise _refused(self.run_id, self.where, self._read())
            time.sleep(POLL_S)
        self._me, self.lost = me, None
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name="collbench-lock", daemon=True)
        self._thread.start()

    def _try(self) -> Holder | None:
        """Ourselves as the holder when the lock was free or stale and our write stayed, else None."""
        holder = self._read()
        if holder is not None and not self._stale(holder):
            return None
        me = Holder.me(uuid.uuid4().hex)
        self._write(me)
        time.sleep(SETTLE_S)  # a racer that read the lock free before our write writes it now
        won = self._read()
        return me if won is not None and won.token == me.token else None

    def release(self) -> None:
        if self._me is None:
            return
        self._stop.set()
        self._thread.join(timeout=LEASE_S)
        try:
            current = self._read()
            if current is not None and current.token == self._me.token:
                self.fs.delete_file(self.path)
        except (UsageError, OSError, pa.ArrowException):
            pass  # a store that does not answer now: the lease runs out by itself
        self._me = None

    def _beat(self) -> None:
        while not self._stop.wait(LEASE_S / 4):
            try:
                if not self.beat_once():
                    return
            except Exception:  # noqa: BLE001 - a store that does not answer now, or answers garbage: the
                continue  # thread must not die (the lease would lapse unnoticed); try again at the next beat

    def beat_once(self) -> bool:
        """Renew the lease if it is still ours (True); else set `lost`, the taker or Vanished (False)."""
        current = self._read()
        if current is None or current.token != self._me.token:
            self.lost = current if current is not None else Vanished()
            return False
        self._write(Holder.me(self._me.token, self._me.since))
        return True

    @staticmethod
    def _stale(holder: Holder) -> bool:
        age_s = (dt.datetime.now(dt.timezone.utc) - holder.heartbeat).total_seconds()
        return age_s > LEASE_S or holder.gone()

    def _read(self) -> Holder | None:
        try:
            with self.fs.open_input_stream(self.path) as f:
                return Holder.from_json(f.read())
        except FileNotFoundError:
            return None
        except (OSError, pa.ArrowException) as e:
            if getattr(e, "errno", None) == errno.ENOENT:
                return None
            raise UsageError(f"{self.path}: cannot read the run's lock ({first_line(e)})") from None

    def _write(self, holder: Holder) -> None:
        try:
            with self.fs.open_output_stream(self.path) as f:
                f.write(holder.to_json())
        except (OSError, pa.ArrowException) as e:
            raise UsageError(f"{self.path}: cannot write the run's lock ({first_line(e)})") from None


def run_lock(fs: pafs.FileSystem, root: str, manifest_dir: str, run_id: str, where: str) -> LocalLock | ObjectLock:
    """The lock of run `run_id` under `root`; `where` names the output in messages."""
    if isinstance(fs, pafs.LocalFileSystem):
        return LocalLock(root, manifest_dir, run_id, where)
    return ObjectLock(fs, root, manifest_dir, run_id, where)
