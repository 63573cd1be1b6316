"""PyTorch's Flight Recorder dumps, read: what `collbench replay`, `predict --trace` and `attach`
take. Pure (reads files; no Ray, no torch).

A dump is what torch.distributed writes per rank with TORCH_FR_BUFFER_SIZE set (on a timeout, on
`torch._C._distributed_c10d._dump_fr_trace()`, or TORCH_FR_DUMP_TEMP_FILE + rank): a pickle of
plain values (version, pg_config, pg_status, entries). It is read by an unpickler that builds no
object but built-in values, so a file cannot run code. A dump does not say whose rank it is: the
number at the end of its file name does (torch names them `<prefix><rank>`).

Each entry gives the collective (`profiling_name` "gloo:all_reduce", "nccl:_allgather_base"),
its process group (name, description), its sequence number in that group, the tensors' shapes and
dtypes, and when it was issued (`time_created_ns`); NCCL with TORCH_NCCL_ENABLE_TIMING also when it
started and finished (`duration_ms`, `time_discovered_completed_ns`). `pg_status` says, per group,
the last collective the rank enqueued and completed. A group's ranks are the dumps that hold
entries of it (gloo's pg_config names only the default group).
"""

from __future__ import annotations

import io
import math
import os
import pickle
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from orchestrator.errors import UsageError

# FR's dtype names (c10::ScalarType) -> collbench's
DTYPES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16", "Long": "int64",
          "Int": "int32", "Char": "int8", "Byte": "uint8", "Bool": "uint8", "Float8_e4m3fn": "float8_e4m3fn",
          "Float8_e5m2": "float8_e5m2", "Short": "int16"}
# FR's profiling names (after "backend:") -> the op replayed; coalesced ops replay as one op of their total size
KINDS = {"all_reduce": "all_reduce", "allreduce": "all_reduce", "all_reduce_coalesced": "all_reduce",
         "allreduce_coalesced": "all_reduce",
         "all_gather": "all_gather", "allgather": "all_gather", "_allgather_base": "all_gather",
         "all_gather_into_tensor_coalesced": "all_gather", "allgather_into_tensor_coalesced": "all_gather",
         "reduce_scatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
         "reduce_scatter_tensor_coalesced": "reduce_scatter", "all_to_all": "all_to_all", "alltoall": "all_to_all",
         "alltoall_base": "all_to_all", "all_to_allv": "all_to_all", "broadcast": "broadcast", "reduce": "reduce",
         "barrier": "barrier"}
_ELEMENT_BYTES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
                  "int8": 1, "uint8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1}


class _PlainValues(pickle.Unpickler):
    """Builds dicts, lists, tuples, strings and numbers only: a dump never needs a class."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"refused {module}.{name}: a Flight Recorder dump holds plain values only")


@dataclass(frozen=True)
class TraceOp:
    rank: int  # global rank of the dump it came from
    index: int  # position in that rank's dump
    group: str  # process group name (global: the same on every rank)
    group_desc: str
    seq: int  # FR's collective_seq_id in that group
    name: str  # FR's profiling_name
    kind: str | None  # the op replayed; None: not replayable (said in `skipped`)
    dtype: str
    in_numel: int
    out_numel: int
    created_ns: int
    duration_us: float | None  # the job's own time of it (NCCL with timing), else None
    completed_ns: int | None = None  # when the rank saw it finish (NCCL with timing), else None
    p2p: bool = False  # a send or recv: numbered by p2p_seq_id, its collective_seq_id the last collective's

    @property
    def msg_bytes(self) -> int:
        """nccl-tests' S: all_gather's whole output, reduce_scatter's whole input, else the buffer."""
        numel = self.out_numel if self.kind == "all_gather" else self.in_numel
        return numel * _ELEMENT_BYTES.get(self.dtype, 4)

    @property
    def signature(self) -> tuple:
        return self.group, self.name, self.in_numel, self.dtype


@dataclass(frozen=True)
class Trace:
    world_size: int
    ops: dict[int, tuple[TraceOp, ...]]  # by global rank, in issue order
    groups: dict[str, tuple[int, ...]]  # name -> its global ranks (sorted), the default group included
    descs: dict[str, str]
    sources: tuple[str, ...]
    status: dict[int, dict] = field(default_factory=dict)  # rank -> its pg_status (group -> last enqueued/completed)
    dumped_ns: dict[int, int] = field(default_factory=dict)  # rank -> when its dump was written (the file's time)

    def group_label(self, name: str) -> str:
        desc = self.descs.get(name) or ""
        return f"{name}:{desc}" if desc and desc != "undefined" else name  # torch's desc of an unnamed group


def dump_files(paths: Sequence[str], every_rank: bool = True) -> list[tuple[int, str]]:
    """(rank, file) for every dump named: files, or folders whose files end in a rank number;
    `every_rank`: refuse a trace with a rank's dump missing (a replay needs them all)."""
    found = []
    for path in paths:
        if "\x00" in path:
            raise UsageError(f"{path!r}: a path cannot hold a NUL character")
        if os.path.isdir(path):
            names = sorted(n for n in os.listdir(path) if not n.startswith(".") and _rank_of(n) is not None)
            if not names:
                raise UsageError(f"{path}: no Flight Recorder dump in it (files named <prefix><rank>, "
                                 "as TORCH_FR_DUMP_TEMP_FILE writes them)")
            found += [(_rank_of(n), os.path.join(path, n)) for n in names]
        elif os.path.isfile(path):
            rank = _rank_of(os.path.basename(path))
            if rank is None:
                raise UsageError(f"{path}: its name does not end in a rank number (a dump's rank is in its name)")
            found.append((rank, path))
        else:
            raise UsageError(f"{path}: no such file or folder")
    ranks = [r for r, _ in found]
    twice = sorted({r for r in ranks if ranks.count(r) > 1})
    if twice:
        raise UsageError(f"rank {twice[0]}: more than one dump ({', '.join(p for r, p in found if r == twice[0])})")
    missing = sorted(set(range(max(ranks) + 1)) - set(ranks))
    if missing and every_rank:
        raise UsageError(f"rank {missing[0]}: no dump (the trace has ranks up to {max(ranks)}; every rank's "
                         "dump is needed to replay its collectives)")
    return sorted(found)


def _rank_of(name: str) -> int | None:
    m = re.search(r"(\d+)(\.(pkl|pickle))?$", name)
    return int(m.group(1)) if m else None


def read_dump(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise UsageError(f"{path}: {e.strerror}") from None
    try:
        dump = _PlainValues(io.BytesIO(data)).load()
    except Exception as e:  # noqa: BLE001 - any unreadable file gets the same one line
        raise UsageError(f"{path}: not a Flight Recorder dump ({type(e).__name__}: {e})") from None
    if not isinstance(dump, dict) or not isinstance(dump.get("entries", []), list):
        raise UsageError(f"{path}: not a Flight Recorder dump (no list of entries)")
    return dump


def load(paths: Sequence[str], every_rank: bool = True) -> Trace:
    """Every rank's dump, read and checked (`every_rank`: as dump_files)."""
    files = dump_files(paths, every_rank)
    status: dict[int, dict] = {}
    dumped: dict[int, int] = {}
    ops: dict[int, tuple[TraceOp, ...]] = {}
    members: dict[str, set[int]] = {}
    descs: dict[str, str] = {}
    for rank, path in files:
        dump = read_dump(path)
        status[rank] = dump.get("pg_status") if isinstance(dump.get("pg_status"), dict) else {}
        dumped[rank] = os.stat(path).st_mtime_ns
        rank_ops = []
        for i, e in enumerate(dump.get("entries") or []):
            try:
                op = _op(rank, i, e)
            except (KeyError, TypeError, ValueError, OverflowError) as err:
                raise UsageError(f"{path}: entry {i}: not a Flight Recorder entry ({type(err).__name__}: {err})"
                                 ) from None
            rank_ops.append(op)
            members.setdefault(op.group, set()).add(rank)
            descs.setdefault(op.group, op.group_desc)
        ops[rank] = tuple(rank_ops)
    world = max(r for r, _ in files) + 1
    if not any(ops.values()):
        raise UsageError(f"{', '.join(paths)}: the dumps hold no collective (was TORCH_FR_BUFFER_SIZE set in the job?)")
    groups = {name: tuple(sorted(ranks)) for name, ranks in members.items()}
    for name, ranks in groups.items():
        if descs.get(name) == "default_pg":
            groups[name] = tuple(range(world))
    return Trace(world, ops, groups, descs, tuple(p for _, p in files), status, dumped)


def _op(rank: int, index: int, e: dict) -> TraceOp:
    backend_name = str(e["profiling_name"])
    name = backend_name.split(":", 1)[-1].split(" ")[0]
    pg_name, pg_desc = e["process_group"]
    dtypes = e.get("input_dtypes") or e.get("output_dtypes") or ["Float"]
    dtype = DTYPES.get(dtypes[0], None)
    kind = KINDS.get(name) if dtype is not None or name == "barrier" else None
    duration = e.get("duration_ms")
    return TraceOp(rank=rank, index=index, group=str(pg_name), group_desc=str(pg_desc),
                   seq=int(e.get("collective_seq_id") or 0), name=name, kind=kind, dtype=dtype or "float32",
                   in_numel=_numel(e.get("input_sizes")), out_numel=_numel(e.get("output_sizes")),
                   created_ns=int(e.get("time_created_ns") or 0),
                   duration_us=float(duration) * 1e3 if duration is not None else None,
                   completed_ns=int(e["time_discovered_completed_ns"]) if e.get("time_discovered_completed_ns")
                   else None, p2p=bool(e.get("is_p2p")))


def _numel(shapes) -> int:
    return sum(math.prod(int(d) for d in shape) for shape in shapes or [])
