"""The NCCL Inspector's per-operation JSON, read per worker process (torch-free).

The Inspector (NCCL 2.28+, a profiler plugin: NVIDIA/nccl plugins/profiler/inspector, before 2.30
ext-profiler/inspector) writes, when NCCL_PROFILER_PLUGIN loads it and NCCL_INSPECTOR_ENABLE=1, one
JSON object per completed operation and communicator to `<dump dir>/<hostname>-pid<pid>.log`
(inspector.cc inspectorStateDumpJSON): `{"header":{"id","comm_name","rank","n_ranks","nnodes"},
"metadata":{...},"coll_perf":{"coll","coll_sn","coll_msg_size_bytes","coll_exec_time_us",
"coll_timing_source","coll_algobw_gbs","coll_busbw_gbs"}}`, or `p2p_perf` with `p2p_*` keys
(inspector_json.cc inspectorCompletedColl/P2p). The writer puts one object on a line; the
Inspector's README shows them indented: both are read. Its own times are the kernels' (GPU
globaltimer, `coll_timing_source` "kernel_gpu"; NCCL_INSPECTOR_REQUIRE_KERNEL_TIMING=0 lets CPU-timed
ones through, which the summaries leave out), its bus bandwidth nccl-tests' formula
(inspector.cc inspectorComputeOpBw). Only a dump thread writes (inspector.cc inspectorStartDumpThread:
none while NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS is -1, its default), and up to NCCL 2.29
it wrote only the latest operation of each communicator per pass: records are samples of a size's
operations, not all of them. Operations below NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES (8192) are not
recorded.

`DumpFile` reads one process' file group by group (as nccl_log.DebugFile reads NCCL's log); a
record cut short by a write in progress is left for the next read, a record that does not parse is
skipped and counted. `group_ops` gives a group's kernel-timed records per (collective, msg_bytes);
`columns` turns every rank's into a row's inspector_busbw_gbps, inspector_time_us and inspector_ops.
"""

from __future__ import annotations

import json
import os
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from workloads.messages import InspectorOps, Status

PLUGIN = "NCCL_PROFILER_PLUGIN"
ENABLE = "NCCL_INSPECTOR_ENABLE"
DUMP_DIR = "NCCL_INSPECTOR_DUMP_DIR"
PROM = "NCCL_INSPECTOR_PROM_DUMP"  # Prometheus text instead of JSON: nothing here reads it
INTERVAL = "NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS"

# A sweep's collectives as the Inspector names them (inspector.cc ncclFuncToString); overlap times
# an all_reduce. all_to_all(v) and send_recv are left out: torch runs them as grouped sends and
# receives (p2p_perf records of every peer's share), and NCCL's own AllToAll gets no bandwidth from
# the Inspector (inspectorComputeOpBw: 0).
NAMES = {"all_reduce": "AllReduce", "overlap": "AllReduce", "all_gather": "AllGather",
         "reduce_scatter": "ReduceScatter", "broadcast": "Broadcast", "reduce": "Reduce"}
# NCCL's count of these is one rank's share (ncclAllGather's sendcount, ncclReduceScatter's
# recvcount), and so is coll_msg_size_bytes: nccl-tests' S is it times n_ranks.
PER_RANK_SIZE = frozenset({"AllGather", "AllGatherV", "ReduceScatter"})
KERNEL = "kernel_gpu"

COLUMNS = ("inspector_busbw_gbps", "inspector_time_us", "inspector_ops")


@dataclass(frozen=True)
class Op:
    """One record as the Inspector wrote it."""

    comm: str  # header.id, the communicator's hash "0x..."
    rank: int
    n_ranks: int
    coll: str  # coll_perf.coll or p2p_perf.p2p: AllReduce, AllGather, Send, ...
    sn: int  # coll_sn / p2p_sn
    size_bytes: int  # coll_msg_size_bytes as written (AllGather, ReduceScatter: one rank's share)
    time_us: float  # coll_exec_time_us
    algbw_gbps: float | None  # coll_algobw_gbs ("nan" is written as a string: None)
    busbw_gbps: float | None  # coll_busbw_gbs
    timing: str | None = None  # coll_timing_source: kernel_gpu, kernel_cpu, collective_cpu (2.28+)
    p2p: bool = False
    peer: int | None = None  # p2p_peer

    @property
    def msg_bytes(self) -> int:
        """The size as nccl-tests and collbench's msg_bytes count it."""
        return self.size_bytes * self.n_ranks if self.coll in PER_RANK_SIZE and not self.p2p else self.size_bytes

    @property
    def kernel_timed(self) -> bool:
        return self.timing in (None, KERNEL)


@dataclass
class Parsed:
    ops: list[Op]
    bad: int = 0  # records that did not parse or lacked a field


def enabled(env: Mapping[str, str]) -> bool:
    """Whether `env` loads the Inspector with JSON output: a profiler plugin named and
    NCCL_INSPECTOR_ENABLE a nonzero number as atoi reads it (inspectorGlobalInit)."""
    return bool(env.get(PLUGIN)) and _atoi(env.get(ENABLE, "")) != 0 and _atoi(env.get(PROM, "")) == 0


def _atoi(text: str) -> int:
    m = re.match(r"\s*([+-]?\d+)", text)
    return int(m.group(1)) if m else 0


def dump_dir(env: Mapping[str, str], cwd: str | None = None) -> str:
    """Where the Inspector writes (inspector.cc genDumpDir): NCCL_INSPECTOR_DUMP_DIR, else
    nccl-inspector-<SLURM_JOBID> or nccl-inspector-unknown-jobid, relative to the process' directory."""
    path = env.get(DUMP_DIR)
    if path is None:
        job = env.get("SLURM_JOBID")  # read by strtol: one without digits is 0
        path = f"nccl-inspector-{_atoi(job)}" if job is not None else "nccl-inspector-unknown-jobid"
    return os.path.join(cwd or os.getcwd(), path)


def dump_file_path(directory: str, hostname: str, pid: int) -> str:
    """One process' file: "%s/%s-pid%d.log" of the dump dir, gethostname() and getpid()."""
    return f"{directory}/{hostname}-pid{pid}.log"


def parse(text: str) -> tuple[Parsed, int]:
    """The records in `text` and how many characters of it they took. A record starts a line
    (the writer's, one a line, and the README's indented ones alike): what does not parse is
    skipped up to the next line that starts with "{" and counted once; a last record cut short
    (the writer's buffer flushed mid-record: no newline after it yet) is left for a later read."""
    decoder = json.JSONDecoder()
    out, i, n = Parsed([]), 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            return out, n
        try:
            obj, end = decoder.raw_decode(text, i)
        except ValueError:
            following = text.find("\n{", i)
            if following >= 0:
                out.bad += 1
                i = following + 1
            elif text.endswith("\n"):  # a whole last line that is not a record
                out.bad += 1
                return out, n
            else:  # the file's last record, perhaps still being written
                return out, i
            continue
        op = record(obj)
        if op is None:
            out.bad += 1
        else:
            out.ops.append(op)
        i = end


def record(obj: object) -> Op | None:
    """One decoded object as an Op, or None where it is not a record of the Inspector's."""
    if not isinstance(obj, dict) or not isinstance(obj.get("header"), dict):
        return None
    head = obj["header"]
    perf, prefix, p2p = obj.get("coll_perf"), "coll", False
    if not isinstance(perf, dict):
        perf, prefix, p2p = obj.get("p2p_perf"), "p2p", True
    if not isinstance(perf, dict):
        return None
    try:
        timing = perf.get(f"{prefix}_timing_source")
        return Op(comm=str(head["id"]), rank=int(head["rank"]), n_ranks=int(head["n_ranks"]),
                  coll=str(perf[prefix]), sn=int(perf[f"{prefix}_sn"]),
                  size_bytes=int(perf[f"{prefix}_msg_size_bytes"]), time_us=float(perf[f"{prefix}_exec_time_us"]),
                  algbw_gbps=_number(perf.get(f"{prefix}_algobw_gbs")),
                  busbw_gbps=_number(perf.get(f"{prefix}_busbw_gbs")), timing=None if timing is None else str(timing),
                  p2p=p2p, peer=int(perf["p2p_peer"]) if p2p and "p2p_peer" in perf else None)
    except (KeyError, TypeError, ValueError):
        return None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None  # "nan" (jsonDouble writes NaN as a string), or missing
    return float(value)


def read_dir(directory: str) -> Parsed:
    """Every process' records in a dump dir (its *.log files; Prometheus' *.prom are not read)."""
    out = Parsed([])
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".log"))
    except OSError:
        return out
    for name in names:
        try:
            with open(os.path.join(directory, name), encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        parsed, _ = parse(text)
        out.ops += parsed.ops
        out.bad += parsed.bad
    return out


class DumpFile:
    """One worker process' Inspector file, read group by group. The file is opened anew ("w") when
    the plugin is set up again after every communicator was destroyed: a file shorter than what was
    read is read from its start."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.bad = 0
        self._offset = 0  # bytes read and parsed, whole records only
        self._group: list[Op] = []

    @classmethod
    def for_process(cls, env: Mapping[str, str], hostname: str, pid: int) -> DumpFile | None:
        """This process' file where `env` loads the Inspector, else None."""
        return cls(dump_file_path(dump_dir(env), hostname, pid)) if enabled(env) else None

    def start_group(self) -> None:
        """A new group starts: what earlier groups' communicators wrote is passed over."""
        self._read()
        self._group = []

    def group_ops(self) -> tuple[InspectorOps, ...]:
        """The current group's kernel-timed collective records so far, per (collective, msg_bytes)."""
        self._group += self._read()
        return summarise(self._group)

    def _read(self) -> list[Op]:
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < self._offset:  # reopened for writing: a new file
                    self._offset = 0
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return []
        text = data.decode("utf-8", errors="surrogateescape")  # encodes back to the same bytes
        parsed, used = parse(text)
        self._offset += len(text[:used].encode("utf-8", errors="surrogateescape"))
        self.bad += parsed.bad
        return parsed.ops


def summarise(ops: Iterable[Op]) -> tuple[InspectorOps, ...]:
    """Kernel-timed collective records per (Inspector name, msg_bytes), in first-seen order; the
    same record read twice (comm, rank, sequence number) counts once."""
    seen: set[tuple] = set()
    out: dict[tuple[str, int], tuple[list[float], list[float]]] = {}
    for op in ops:
        key = (op.comm, op.rank, op.coll, op.sn)
        if op.p2p or not op.kernel_timed or op.busbw_gbps is None or key in seen:
            continue
        seen.add(key)
        busbw, time_us = out.setdefault((op.coll, op.msg_bytes), ([], []))
        busbw.append(op.busbw_gbps)
        time_us.append(op.time_us)
    return tuple(InspectorOps(coll, size, tuple(b), tuple(t)) for (coll, size), (b, t) in out.items())


@dataclass(frozen=True)
class Summary:
    ops: int  # records of this collective and size, over every rank given
    busbw_gbps: float | None  # median of the Inspector's own bus bandwidth
    time_us: float | None  # median of its kernel time


def summary(collective: str, msg_bytes: int, per_rank: Iterable[Sequence[InspectorOps]]) -> Summary:
    """One case's (a sweep's collective name, collbench's msg_bytes) records over the ranks given."""
    name = NAMES.get(collective)
    busbw: list[float] = []
    time_us: list[float] = []
    for ops in per_rank:
        for o in ops:
            if o.coll == name and o.msg_bytes == msg_bytes:
                busbw += o.busbw_gbps
                time_us += o.time_us
    if not busbw:
        return Summary(0, None, None)
    return Summary(len(busbw), statistics.median(busbw), statistics.median(time_us))


def columns(row: Mapping, per_rank: Sequence[Sequence[InspectorOps] | None]) -> dict:
    """A measured row's inspector columns from its group's ranks (None: the Inspector was not
    loaded there). Nothing where no rank loaded it, or for a row without a size; 0 ops and null
    times where it was loaded and wrote nothing of this collective and size (a size under
    NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES, no dump thread, a collective it does not time)."""
    loaded = [ops for ops in per_rank if ops is not None]
    if not loaded or row.get("msg_bytes") is None or row.get("collective") is None:
        return {}
    s = summary(row["collective"], row["msg_bytes"], loaded)
    return {"inspector_busbw_gbps": s.busbw_gbps, "inspector_time_us": s.time_us, "inspector_ops": s.ops}


def fill_rows(rows: Iterable[dict], directory: str) -> Parsed:
    """Post-processing: the inspector columns of measured rows from a dump dir's files (every
    process there, each its own rank); returns what was read. Rows of other groups than the
    dump's communicators are filled too: give a directory of one run's dumps."""
    parsed = read_dir(directory)
    ops = summarise(parsed.ops)
    for row in rows:
        if row.get("status") == Status.OK.value:
            row.update(columns(row, [ops]))
    return parsed
