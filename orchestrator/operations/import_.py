"""nccl-tests output files as a collbench run (`collbench import`): each test of each file is one
group of the run, each size one row per placement (out-of-place, in-place), written through the
product's ResultStore with a manifest (command "import", the sources in `sources`), so that
report, compare and predict read it as any run.

Every file is read and every row made before anything is written: a bad file, host list or
topology is refused in one line and leaves nothing behind (exit 2); a write that fails part-way
removes the run's folder and says so in one line (exit 1).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import sys
from collections import Counter
from dataclasses import dataclass

import pyarrow.fs as pafs

import orchestrator
from orchestrator.errors import RunStopped, UsageError
from orchestrator.results import nccl_tests
from orchestrator.results.location import MANIFEST_DIR, check_writable, new_run_id
from orchestrator.results.schema import RunState, check_columns
from orchestrator.results.store import ResultStore
from orchestrator.sweep.platform import gpu_tag
from workloads.dtypes import ELEMENT_BYTES
from workloads.messages import Status, Topology, topology_of

TOPOLOGIES = tuple(t.value for t in (Topology.INTRA, Topology.INTER, Topology.MIXED))  # what a file's hosts can say
_ELEMENT_BYTES = {**ELEMENT_BYTES, "uint8": 1, "uint32": 4, "int64": 8, "uint64": 8}
_COLLECTIVES = {**{v: v for v in nccl_tests.COLLECTIVES.values()}, **nccl_tests.COLLECTIVES}


@dataclass(frozen=True, kw_only=True)
class ImportOptions:
    """What to import and where, checked when made."""

    paths: tuple[str, ...]
    """nccl-tests output files: text tables (2.13 on) or -J JSON (2.19)."""
    output: str
    """The results dataset to write the run to (a folder or an s3://, gs:// URI)."""
    hosts: tuple[str, ...] = ()
    """One host per rank, or one per node (ranks in equal blocks, as mpirun places them); empty: the
    hosts of the files' `#  Rank` lines."""
    topology: str | None = None  # one of TOPOLOGIES
    """intra, inter or mixed: checked against the hosts (a contradiction is refused); None: from them."""
    run_id: str | None = None
    """The run's id; None: a new one, as a sweep's."""
    collective: str | None = None
    """The collective of a file that does not name its binary (collbench's or nccl-tests' name)."""

    def __post_init__(self) -> None:
        if not self.paths:
            raise UsageError("import: name at least one nccl-tests output file")
        if self.topology is not None and self.topology not in TOPOLOGIES:
            raise UsageError(f"--topology {self.topology[:40]!r}: intra, inter or mixed")
        check_hosts(self.hosts)
        if self.run_id is not None and (not self.run_id or not all(c.isalnum() or c in "-_." for c in self.run_id)
                                        or self.run_id[0] in "._"):
            raise UsageError(f"--run-id {self.run_id[:40]!r}: letters, digits, '-', '_' and '.', not first '.' or '_'")
        if self.collective is not None and _collective(self.collective) is None:
            raise UsageError(f"--collective {self.collective[:40]!r}: one of {', '.join(nccl_tests.COLLECTIVES.values())}"
                             f" (or nccl-tests' {', '.join(nccl_tests.COLLECTIVES)})")


@dataclass(frozen=True)
class Imported:
    """The run written: its id, where, how many rows and groups, and its sources."""

    run_id: str
    location: str
    rows: int
    groups: int
    sources: list[dict]


def _collective(name: str) -> str | None:
    return _COLLECTIVES.get(name.removesuffix("_perf"))


def import_run(options: ImportOptions, now: dt.datetime | None = None) -> Imported:
    """Read every file, make every row, then write the run; UsageError (nothing written) for a bad file or option."""
    now = now or dt.datetime.now(dt.timezone.utc)
    run_id = options.run_id or new_run_id(now)
    groups: list[tuple[str, list[dict]]] = []
    sources = []
    for path in options.paths:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise UsageError(f"{path}: cannot read it ({e.strerror or e})") from None
        for section in nccl_tests.parse(path, data):
            group_id = f"import-{len(groups)}"
            groups.append((group_id, section_rows(path, section, options, run_id, now, group_id, len(groups))))
            sources.append({"path": os.path.abspath(path), "format": "json" if data.lstrip().startswith(b"{") else "text",
                            "group_id": group_id, "binary": section.binary, "nccl_tests_version": section.version,
                            "command_line": section.command_line, "start_time": section.start_time,
                            "avg_busbw_gbps": section.avg_busbw_gbps})
    check_writable(options.output)
    store = ResultStore(options.output, run_id)
    there = store.fs.get_file_info([store.run_dir, f"{store.root}/{MANIFEST_DIR}/{run_id}.json"])
    if any(i.type != pafs.FileType.NotFound for i in there):
        raise UsageError(f"--run-id {run_id}: {options.output} holds that run already")
    store.acquire()
    try:
        store.create()
        for group_id, rows in groups:
            store.write_group(group_id, rows)
        store.compact()
        store.write_manifest(_manifest(groups, sources, now))
    except BaseException as e:
        with contextlib.suppress(Exception):
            store.fs.delete_dir(store.run_dir)
        if isinstance(e, OSError):  # a full disk, a store that went away: said in one line, exit 1
            raise RunStopped(f"{options.output}: writing run {run_id} failed ({e.strerror or e}); nothing of it "
                             "kept") from None
        raise
    finally:
        store.release()
    return Imported(run_id, store.location, sum(len(r) for _, r in groups), len(groups), sources)


def section_rows(path: str, s: nccl_tests.Section, options: ImportOptions, run_id: str, started: dt.datetime,
                 group_id: str, round_: int) -> list[dict]:
    """The rows of one test of a file: one per size and placement measured."""
    named = _collective(options.collective) if options.collective else None
    if s.collective and named and named != s.collective:
        raise UsageError(f"--collective {options.collective}: {path} says it is {s.binary}'s output ({s.collective})")
    collective = s.collective or named
    if collective is None:
        raise UsageError(f"{path}: does not say which nccl-tests binary wrote it; name it with --collective")
    if len({r.group for r in s.ranks}) > 1:
        raise UsageError(f"{path}: its ranks ran as {len({r.group for r in s.ranks})} groups at once "
                         "(NCCL_TESTS_SPLIT), whose table is one group's: not read")
    hosts, topology = _placement(path, s, options)
    per_node = Counter(hosts)
    ranks = s.ranks
    gpu_models = sorted({r.gpu_model for r in ranks if r.gpu_model})
    base = {
        "run_id": run_id, "started_at": started, "collective": collective, "backend": "nccl",
        "world_size": len(hosts), "n_nodes": len(per_node), "ranks_per_node": max(per_node.values()),
        "topology": topology, "pattern": topology, "group_id": group_id, "round": round_, "groups_in_round": 1,
        "ranks": list(range(len(hosts))), "local_ranks": [r.device for r in ranks] if ranks else None,
        "hosts": hosts, "node_ips": hosts, "node_ids": hosts,
        "devices": [f"gpu:{r.device}" for r in ranks] if ranks else None,
        "pids": [r.pid for r in ranks] if ranks else None,
        "gpu_model": ",".join(gpu_models) or None, "nccl_version": s.nccl_version,
        # the GPU's tag (H100 80GB HBM3 -> h100-sxm) where one model ran: the expected values that
        # name it apply; the NICs and the GPU count of a node are not in nccl-tests' output
        "platform": gpu_tag(gpu_models[0]) if len(gpu_models) == 1 else None,
        "iters": s.iters, "warmup": s.warmup, "check_iters": s.check_iters, "status": Status.OK.value,
    }
    rows = []
    for result in s.results:
        elem = _ELEMENT_BYTES.get(result.dtype)
        for in_place, t in ((False, result.out_of_place), (True, result.in_place)):
            if t is None:
                continue
            per = t.per_iter
            row = {**base, "dtype": result.dtype, "op": result.op, "in_place": in_place, "msg_bytes": result.msg_bytes,
                   "count": result.msg_bytes // elem if elem else result.count, "time_us": t.time_us,
                   "algbw_gbps": t.algbw_gbps, "busbw_gbps": t.busbw_gbps, "n_wrong": t.n_wrong,
                   # nccl-tests' own way is collbench's batch columns: the timed iterations as one
                   "time_us_batch": t.time_us, "busbw_gbps_batch": t.busbw_gbps,
                   "time_us_min": per.get("min_us"), "time_us_max": per.get("max_us"),
                   "time_us_p50": per.get("p50_us"), "time_us_p99": per.get("p99_us"),
                   "time_cv": per["cv_pct"] / 100 if per.get("cv_pct") is not None else None,
                   "iter_time_us": per.get("times_us")}
            rows.append(row)
    check_columns(k for r in rows[:1] for k in r)
    return rows


def hosts_per_rank(given: list[str], n: int, what: str) -> list[str]:
    """--hosts as each of `n` ranks' host: one per rank, or one per node for equal consecutive
    blocks of ranks (as mpirun -N and torchrun place them)."""
    if len(given) != n and (len(given) > n or n % len(given)):
        raise UsageError(f"--hosts: {len(given)} host(s) for {what}: name one per rank, or one per node for equal "
                         "blocks of ranks")
    return given if len(given) == n else [given[r * len(given) // n] for r in range(n)]


def check_hosts(hosts: tuple[str, ...]) -> None:
    for host in hosts:
        if not host or not host.isprintable() or " " in host:
            raise UsageError(f"--hosts: {host[:40]!r} is not a host name")


def _placement(path: str, s: nccl_tests.Section, options: ImportOptions) -> tuple[list[str], str]:
    """Each rank's host (the file's, or --hosts) and the group's topology (checked against --topology)."""
    from_file = [r.host for r in s.ranks]
    if [r.rank for r in s.ranks] != list(range(len(s.ranks))):
        raise UsageError(f"{path}: its '#  Rank' lines are not ranks 0..{len(s.ranks) - 1} in order (a truncated list?)")
    n = len(from_file)
    given = list(options.hosts)
    if given:
        hosts = hosts_per_rank(given, n, f"the {n} ranks of {path}") if n else given
    elif n:
        hosts = from_file
    else:
        raise UsageError(f"{path}: has no '#  Rank' lines saying where its ranks ran; name a host per rank with --hosts")
    nodes = len(set(hosts))
    topology = topology_of(hosts).value
    if options.topology and options.topology != topology:
        raise UsageError(f"--topology {options.topology}: the {len(hosts)} ranks of {path} ran on {nodes} host(s), "
                         f"which is {topology}; name the hosts with --hosts where the file's are not the machines")
    return hosts, topology


def _manifest(groups: list[tuple[str, list[dict]]], sources: list[dict], now: dt.datetime) -> dict:
    rows = [r for _, g in groups for r in g]
    return {
        "started_at": now, "finished_at": dt.datetime.now(dt.timezone.utc), "state": RunState.FINISHED.value,
        "command": "import", "collbench_version": orchestrator.__version__, "backend": "nccl",
        "nccl_version": ",".join(sorted({r["nccl_version"] for r in rows if r["nccl_version"]})) or None,
        "hostnames": sorted({h for r in rows for h in r["hosts"]}),
        "device_models": sorted({r["gpu_model"] for r in rows if r["gpu_model"]}),
        "command_line": " ".join(sys.argv), "groups_total": len(groups), "groups_done": len(groups),
        "sources": json.dumps(sources),
    }
