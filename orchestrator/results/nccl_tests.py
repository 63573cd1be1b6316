"""nccl-tests output, read: the text tables of nccl-tests 2.13 on (`# nThread ...`, `#  Rank ...`,
the out-of-place and in-place columns, `# Avg bus bandwidth`) and the `-J` JSON of 2.19 (the
writer of its src/util.cu, file version 3). Pure: bytes in, `Section`s out; no I/O, no rows.

A text file may hold several tests one after another (a log of several binaries): each
`# nThread` line after a table starts a new section. A bad file is refused with `BadFile`, one
line naming the file and the line (or the JSON key) and the value.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

from orchestrator.errors import UsageError

# nccl-tests' binaries (without `_perf` and any NAME_SUFFIX) -> collbench's collectives
COLLECTIVES = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
               "alltoall": "all_to_all", "alltoallv": "all_to_allv", "broadcast": "broadcast", "reduce": "reduce",
               "sendrecv": "send_recv"}
# nccl-tests' type names (2.19's and older ones) -> collbench's dtypes; the unsigned and 64-bit
# integers, which collbench does not sweep, keep their names
DTYPES = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64", "int32": "int32",
          "int": "int32", "int8": "int8", "char": "int8", "f8e4m3": "float8_e4m3", "f8e5m2": "float8_e5m2",
          "uint8": "uint8", "uint32": "uint32", "int64": "int64", "uint64": "uint64"}
# and back, for printing collbench's rows in nccl-tests' layout (2.19's names)
TYPE_NAMES = {"float32": "float", "float16": "half", "float64": "double", "float8_e4m3": "f8e4m3",
              "float8_e5m2": "f8e5m2"}
BINARIES = {collective: f"{name}_perf" for name, collective in COLLECTIVES.items()}
OPS = ("sum", "prod", "max", "min", "avg", "mulsum", "none")

_RANK = re.compile(r"#\s*Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+"
                   r"\[([^\]]*)\]\s*(.*?)\s*$")
_VERSION = re.compile(r"#\s*nccl-tests version (\S+)(?:.*nccl-library=(\d+))?")
_STARTING = re.compile(r"#\s*Collective test starting:\s*(\S+)")
_CONFIG = re.compile(r"warmup iters:\s*(\d+)\s+iters:\s*(\d+).*?validation:\s*(\d+)")
_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*(\S+)")
_NCCL_LOG = re.compile(r"^\S+:\d+:\d+ \[\d+\] NCCL ")  # NCCL_DEBUG lines interleaved with the table
_BANNER = re.compile(r"NCCL version (\d+\.\d+\.\d+)\b")  # NCCL's own line on stdout: NCCL version 2.28.7+cuda13.0
_PROMPT = re.compile(r"^[$>]\s+")  # a shell prompt, or a Markdown quote, before a pasted command line
_BINARY = re.compile(r"([A-Za-z][A-Za-z0-9]*(?:_[a-z0-9]+)*?)_perf(?![A-Za-z0-9])")


class BadFile(UsageError):
    """A file that is not nccl-tests output, or not all of it readable: one line, exit 2."""


@dataclass(frozen=True)
class Rank:
    """One `#  Rank` line (JSON: one of config.devices)."""

    rank: int
    group: int  # NCCL_TESTS_SPLIT's color (0 before 2.13, which printed none)
    pid: int
    host: str
    device: int
    gpu_model: str


@dataclass(frozen=True)
class Timing:
    """One placement's measurement: time, bandwidths, #wrong (None: N/A), and the -I figures."""

    time_us: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    n_wrong: int | None
    per_iter: dict = field(default_factory=dict)  # min_us, max_us, p99_us, cv_pct, p50_us, times_us


@dataclass(frozen=True)
class Result:
    """One row of the table: a size, with its out-of-place and in-place measurements."""

    msg_bytes: int
    count: int
    dtype: str  # collbench's name
    op: str
    root: int
    out_of_place: Timing | None
    in_place: Timing | None


@dataclass
class Section:
    """One test of a file: what ran, where, and its table."""

    collective: str | None = None  # collbench's name; None: the file does not say
    binary: str | None = None  # e.g. all_reduce_perf
    version: str | None = None  # nccl-tests'
    nccl_version: str | None = None
    command_line: str | None = None
    start_time: str | None = None
    iters: int | None = None
    warmup: int | None = None
    check_iters: int | None = None
    ranks: list[Rank] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)
    avg_busbw_gbps: float | None = None


def parse(path: str, data: bytes) -> list[Section]:
    """The sections of one file's bytes; BadFile naming `path` where it is not nccl-tests output."""
    if b"\0" in data:
        line = data[:data.index(b"\0")].count(b"\n") + 1
        raise BadFile(f"{path} line {line}: binary data, not nccl-tests output")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise BadFile(f"{path} line {line}: not text (byte {e.start} is not UTF-8)") from None
    if not text.strip():
        raise BadFile(f"{path}: empty, no nccl-tests output in it")
    sections = _json(path, text) if text.lstrip().startswith("{") else _text(path, text)
    if not any(s.results for s in sections):
        raise BadFile(f"{path}: no nccl-tests result table in it (no row under a '# size count type' header)")
    return [s for s in sections if s.results]


def collective_of(binary: str) -> str | None:
    """collbench's collective for an nccl-tests binary name or path (all_reduce_perf, ./build/alltoall_perf_mpi);
    None where the name is no nccl-tests binary; KeyError naming it where collbench has no such collective."""
    found = _BINARY.search(binary.rsplit("/", 1)[-1])
    if not found:
        return None
    if found.group(1) not in COLLECTIVES:
        raise KeyError(f"{found.group(0)} measures {found.group(1)}, which collbench has no collective for "
                       f"(it reads {', '.join(k + '_perf' for k in COLLECTIVES)})")
    return COLLECTIVES[found.group(1)]


def nccl_version(code: int) -> str:
    """NCCL_VERSION_CODE as a version: 22005 -> 2.20.5 (2.9 on), 2708 -> 2.7.8 (before)."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def _name(path: str, where: str, binary: str) -> str | None:
    try:
        return collective_of(binary)
    except KeyError as e:
        raise BadFile(f"{path} {where}: {e.args[0]}") from None


def _text(path: str, text: str) -> list[Section]:
    sections = [Section()]
    columns: list[str] | None = None  # the table's header, while in a table
    for n, line in enumerate(text.splitlines(), 1):
        s = sections[-1]
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            words = stripped.lstrip("#").split()
            if s.results and (stripped.startswith("# nThread") or _STARTING.match(stripped)
                              or _VERSION.match(stripped)):
                sections.append(Section(collective=s.collective, binary=s.binary, command_line=s.command_line))
                s, columns = sections[-1], None
            if m := _VERSION.match(stripped):
                s.version = m.group(1)
                s.nccl_version = nccl_version(int(m.group(2))) if m.group(2) else None
            elif m := _STARTING.match(stripped):
                s.binary, s.collective = m.group(1), _name(path, f"line {n}", m.group(1))
            elif stripped.startswith("# nThread") and (m := _CONFIG.search(stripped)):
                s.warmup, s.iters, s.check_iters = int(m.group(1)), int(m.group(2)), int(m.group(3))
            elif m := _RANK.match(stripped):
                s.ranks.append(Rank(int(m.group(1)), int(m.group(2) or 0), int(m.group(3)), m.group(4),
                                    int(m.group(5)), m.group(7)))
            elif words[:3] == ["size", "count", "type"]:
                columns = words
            elif m := _AVG.match(stripped):
                s.avg_busbw_gbps = _number(f"{path} line {n}", "Avg bus bandwidth", m.group(1))
                columns = None
            elif stripped.startswith("# Out of bounds"):
                columns = None
            continue
        if m := _BANNER.match(stripped):  # NCCL's banner: its release where no '# nccl-tests version' line said it
            s.nccl_version = s.nccl_version or m.group(1)
            continue
        cells = stripped.split()
        if columns is not None and (cells[0][0].isdigit() or len(cells) == len(columns)):
            s.results.append(_row(path, n, columns, cells))  # a row: read whole or refused
        elif columns is not None:
            continue  # other output inside the table (NCCL_DEBUG lines, MPI's warnings)
        elif "_perf" in stripped and not _NCCL_LOG.match(stripped) and s.command_line is None:
            s.command_line = _PROMPT.sub("", stripped)
            binary = next((w for w in s.command_line.split() if _BINARY.search(w.rsplit("/", 1)[-1])), None)
            if binary and s.collective is None:
                s.binary, s.collective = binary.rsplit("/", 1)[-1], _name(path, f"line {n}", binary)
    return sections


def _row(path: str, n: int, columns: list[str], cells: list[str]) -> Result:
    """One table row, read by the header's names (root and -I's columns where the header has them)."""
    where = f"{path} line {n}"
    width = len(columns) - (1 if columns[-1] == "timestamp" else 0)
    if len(cells) not in (width, width + 2) or (len(cells) == width + 2 and columns[-1] != "timestamp"):
        raise BadFile(f"{where}: {len(cells)} fields where the table's header has {width}: {' '.join(cells)[:80]!r}")
    ident = ("size", "count", "type", "redop", "root")
    first: dict[str, str] = {}
    placements: list[dict[str, str]] = [{}]
    for name, cell in zip(columns, cells):
        if name in ident and name not in first:
            first[name] = cell
        elif name != "timestamp":
            if name in placements[-1]:  # the in-place columns repeat the out-of-place ones' names
                placements.append({})
            placements[-1][name] = cell
    if "size" not in first or "count" not in first or len(placements) > 2:
        raise BadFile(f"{where}: a table whose header is not nccl-tests' ({' '.join(columns)[:80]!r})")
    placements += [{}] * (2 - len(placements))
    size, count = _int(where, "size", first["size"]), _int(where, "count", first["count"])
    dtype, op = first.get("type", ""), first.get("redop", "none")
    if dtype not in DTYPES:
        raise BadFile(f"{where}: type {dtype[:40]!r} is not an nccl-tests type ({', '.join(DTYPES)})")
    if op not in OPS:
        raise BadFile(f"{where}: redop {op[:40]!r} is not an nccl-tests reduction ({', '.join(OPS)})")
    root = _int(where, "root", first["root"], signed=True) if "root" in first else -1
    out, inp = (_timing(where, p) if p else None for p in placements)
    return Result(size, count, DTYPES[dtype], op, root, out, inp)


def _timing(where: str, cells: dict) -> Timing:
    wrong = cells.get("#wrong", "N/A")
    per_iter = {key: _number(where, name, cells[name]) for name, key in
                (("i_min", "min_us"), ("i_max", "max_us"), ("i_p99", "p99_us"), ("i_cv%", "cv_pct")) if name in cells}
    return Timing(_number(where, "time", cells.get("time", cells.get("cputime", "nan"))),
                  _number(where, "algbw", cells.get("algbw", "nan")), _number(where, "busbw", cells.get("busbw", "nan")),
                  None if wrong == "N/A" else _int(where, "#wrong", wrong, exponent=True), per_iter)


def _int(where: str, name: str, cell: str, signed: bool = False, exponent: bool = False) -> int:
    if exponent and re.fullmatch(r"\d+(\.\d*)?e\+?\d+", cell):  # printf %g of a large #wrong: 1.2e+07
        return int(float(cell))
    if not re.fullmatch(r"-?\d+" if signed else r"\d+", cell):
        raise BadFile(f"{where}: {name} {cell[:40]!r} is not a whole number")
    return int(cell)


def _number(where: str, name: str, cell) -> float | None:
    """A figure of the table or the JSON; a NaN (nccl-tests writes nan, or "nan" in JSON) or an
    infinity is None: not a measurement."""
    if cell is None:
        return None
    try:
        if isinstance(cell, bool) or not isinstance(cell, (str, int, float)):
            raise TypeError
        value = float(cell)
    except (TypeError, ValueError):
        raise BadFile(f"{where}: {name} {str(cell)[:40]!r} is not a number") from None
    return value if math.isfinite(value) else None


def _json(path: str, text: str) -> list[Section]:
    try:
        doc = json.loads(text)
    except ValueError as e:
        line = getattr(e, "lineno", None)
        raise BadFile(f"{path}{f' line {line}' if line else ''}: not valid JSON ({getattr(e, 'msg', e)})") from None
    config = doc.get("config") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list) or not isinstance(config, dict):
        keys = ", ".join(list(doc)[:6]) if isinstance(doc, dict) else type(doc).__name__
        raise BadFile(f"{path}: a JSON of another shape than nccl-tests' -J output (needs 'config' and 'results'; "
                      f"has {keys})")
    args = doc.get("args") if isinstance(doc.get("args"), list) else []
    binary = str(args[0]).rsplit("/", 1)[-1] if args else None
    s = Section(binary=binary, collective=_name(path, "args[0]", binary) if binary else None,
                command_line=" ".join(map(str, args)) or None, start_time=doc.get("start_time"),
                iters=_opt_int(config.get("iterations")), warmup=_opt_int(config.get("warmup_iters")),
                check_iters=_opt_int(config.get("validation")))
    if isinstance(doc.get("nccl_version"), int):
        s.nccl_version = nccl_version(doc["nccl_version"])
    for i, d in enumerate(config.get("devices") or []):
        where = f"{path} config.devices[{i}]"
        if not isinstance(d, dict):
            raise BadFile(f"{where}: not an object")
        s.ranks.append(Rank(_jint(where, d, "rank"), _jint(where, d, "group") if d.get("group") else 0,
                            _jint(where, d, "pid"),
                            str(d.get("hostname", "")),
                            _jint(where, d, "device"), str(d.get("device_info", ""))))
    for i, r in enumerate(doc["results"]):
        s.results.append(_json_result(f"{path} results[{i}]", r))
    avg = doc.get("average_bus_bandwidth", doc.get("average_bus_bandwidith"))  # spelt so before Feb 2026
    if isinstance(avg, dict):
        s.avg_busbw_gbps = _number(f"{path} average_bus_bandwidth", "bandwidth",
                                   avg.get("bandwidth", avg.get("bandwidith")))
    return [s]


def _json_result(where: str, r) -> Result:
    if not isinstance(r, dict):
        raise BadFile(f"{where}: not an object")
    dtype, op = r.get("type"), r.get("redop")
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise BadFile(f"{where}.type: {str(dtype)[:40]!r} is not an nccl-tests type")
    if not isinstance(op, str) or op not in OPS:
        raise BadFile(f"{where}.redop: {str(op)[:40]!r} is not an nccl-tests reduction")
    root = str(r.get("root", "-1")).strip()
    timings = []
    for key in ("out_of_place", "in_place"):
        t = r.get(key)
        if t is None:
            timings.append(None)
            continue
        if not isinstance(t, dict):
            raise BadFile(f"{where}.{key}: not an object")
        w = f"{where}.{key}"
        per = r.get(f"{key}_per_iter") if isinstance(r.get(f"{key}_per_iter"), dict) else {}
        per_iter = {k: _number(f"{where}.{key}_per_iter", k, per[k]) for k in ("min_us", "max_us", "p99_us",
                                                                                "p50_us", "cv_pct") if k in per}
        if isinstance(per.get("times_us"), list):
            per_iter["times_us"] = [_number(f"{where}.{key}_per_iter", "times_us", v) for v in per["times_us"]]
        wrong = t.get("nwrong")
        timings.append(Timing(_number(w, "time", t.get("time", t.get("cpu_time"))), _number(w, "alg_bw", t.get("alg_bw")),
                              _number(w, "bus_bw", t.get("bus_bw")),
                              _whole(_number(w, "nwrong", wrong)), per_iter))
    return Result(_jint(where, r, "size"), _jint(where, r, "count"), DTYPES[dtype], op,
                  int(root) if re.fullmatch(r"-?\d+", root) else -1, *timings)


def _whole(value: float | None) -> int | None:
    return None if value is None else int(value)


def _jint(where: str, d: dict, key: str) -> int:
    value = d.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < -1:
        raise BadFile(f"{where}.{key}: {str(value)[:40]!r} is not a whole number")
    return value


def _opt_int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
