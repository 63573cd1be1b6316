"""Scale of the driver: `collbench plan` and `collbench report` on synthetic clusters and datasets
of growing size, and Parquet write/read rates for a million rows.

    python benchmarks/scale.py                    # 64, 256, 1024 nodes x 8 GPUs
    python benchmarks/scale.py --nodes 1024 --faults --no-parquet

Each command runs in its own process under /usr/bin/time (wall seconds, peak RSS); the report's
figures are the best of --repeat runs. Beside the report, what it cannot beat: pyarrow reading the
columns the report reads, in a process of its own (`read_proc_s`: Python, pyarrow's import and the
read; the report's ratio to it is `x_read`) and inside this one (`read_s`), and the report's own read
of them (`own_read_s`: collbench's dataset reader, in this process); and the least a collbench command
reading them costs, judging nothing (`floor_s`: Python, collbench's imports and its read, in a process
of its own; `x_floor` its ratio to `read_proc_s`). --faults: the largest dataset again with 1% of its
pairs at 0.3x (a flag per slow pair) and with an expected value no pair reaches (every group below
expected).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from orchestrator.results.schema import ROW_SCHEMA, SCHEMA_VERSION  # noqa: E402
from orchestrator.sweep.planner import circle_rounds  # noqa: E402

PATTERNS = "intra,inter,mixed,pairwise,kbatch:8"


def timed(cmd: list[str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MiB, stdout) of one command."""
    proc = subprocess.run(["/usr/bin/time", "-f", "%e %M", *cmd], capture_output=True, text=True)
    wall, rss_kb = proc.stderr.strip().splitlines()[-1].split()
    return float(wall), int(rss_kb) / 1024, proc.stdout


def pairwise_dataset(root: str, nodes: int, sizes: list[int], files: int = 16, slow_every: int = 0) -> int:
    """A run of all_reduce over every node pair (2 ranks each) at `sizes`; returns its row count.
    `slow_every` k: every k-th pair at 0.3x the others' rate."""
    pairs = np.array([p for rnd in circle_rounds(nodes) for p in rnd])
    n = len(pairs) * len(sizes)
    a = np.repeat(pairs[:, 0], len(sizes))
    b = np.repeat(pairs[:, 1], len(sizes))
    msg = np.tile(np.array(sizes, dtype=np.int64), len(pairs))
    rng = np.random.default_rng(1)
    time_us = 20 + msg / 40e3 * rng.uniform(0.95, 1.05, n)
    if slow_every:
        time_us = time_us / np.where(np.repeat(np.arange(len(pairs)), len(sizes)) % slow_every == 0, 0.3, 1.0)
    ip = np.array([f"10.{i // 250}.{i % 250}.1" for i in range(nodes)], dtype=object)
    nid = np.array([f"node-{i:05d}" for i in range(nodes)], dtype=object)
    lists = lambda x, y: [[u, v] for u, v in zip(x, y)]  # noqa: E731
    cols = {
        "schema_version": np.full(n, SCHEMA_VERSION, np.int32), "run_id": np.full(n, "bench", object),
        "started_at": np.full(n, dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)),
        "collective": np.full(n, "all_reduce", object), "backend": np.full(n, "nccl", object),
        "dtype": np.full(n, "bfloat16", object), "op": np.full(n, "sum", object), "in_place": np.ones(n, bool),
        "msg_bytes": msg, "count": msg // 2, "world_size": np.full(n, 2, np.int32), "n_nodes": np.full(n, 2, np.int32),
        "ranks_per_node": np.ones(n, np.int32), "topology": np.full(n, "inter", object),
        "pattern": np.full(n, "pairwise", object), "group_id": np.repeat(np.arange(len(pairs)), len(sizes)).astype(str),
        "round": np.zeros(n, np.int32), "groups_in_round": np.full(n, nodes // 2, np.int32),
        "ranks": lists(a, b), "hosts": lists(nid[a], nid[b]), "node_ips": lists(ip[a], ip[b]),
        "node_ids": lists(nid[a], nid[b]), "devices": [["cuda:0", "cuda:0"]] * n, "pids": [[1, 2]] * n,
        "iters": np.full(n, 20, np.int32), "warmup": np.full(n, 5, np.int32), "check_iters": np.ones(n, np.int32),
        "time_us": time_us, "time_us_p50": time_us, "time_us_p99": time_us, "time_us_min": time_us,
        "time_us_max": time_us, "time_cv": np.zeros(n), "algbw_gbps": msg / time_us / 1e3,
        "busbw_gbps": msg / time_us / 1e3, "n_wrong": np.zeros(n, np.int64), "status": np.full(n, "ok", object),
        "error": np.full(n, None, object), "failed_ranks": [None] * n, "pair_nodes": lists(nid[a], nid[b]),
        "iter_time_us": [[t] * 4 for t in time_us], "rank_time_us": lists(time_us, time_us),
    }
    nulls = np.full(n, None, object)  # columns of other workloads (overlap)
    table = pa.table({f.name: pa.array(cols.get(f.name, nulls), type=f.type) for f in ROW_SCHEMA}, schema=ROW_SCHEMA)
    os.makedirs(f"{root}/bench", exist_ok=True)
    step = -(-n // files)
    for i in range(files):
        pq.write_table(table.slice(i * step, step), f"{root}/bench/part-{i:03d}.parquet")
    return n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", default="64,256,1024")
    p.add_argument("--repeat", type=int, default=3, help="runs of each report and read; the best is printed")
    p.add_argument("--faults", action="store_true", help="also report faulty copies of the largest dataset")
    p.add_argument("--no-parquet", action="store_true", help="skip the Parquet write/read rates")
    a = p.parse_args()
    cli = [sys.executable, "-m", "orchestrator"]
    from orchestrator.analysis.frame import COLUMNS as REPORT_COLUMNS
    from orchestrator.analysis.frame import DICTIONARY
    from orchestrator.results import dataset

    def best(fn) -> tuple:
        return min((fn() for _ in range(a.repeat)), key=lambda r: r[0])

    def in_process(fn) -> tuple[float]:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0,)

    def report(root: str, *extra: str) -> tuple[float, float, int]:
        wall, rss, out = best(lambda: timed([*cli, "report", root, "--format", "json", *extra]))
        return wall, rss, len(json.loads(out)["flags"])

    read_cmd = [sys.executable, "-c", "import sys, pyarrow.parquet as pq; "
                "pq.read_table(sys.argv[1], columns=sys.argv[2].split(','))"]
    # the least any collbench command that reads these rows costs: Python, collbench's imports, its read
    floor_cmd = [sys.executable, "-c", "import sys; from orchestrator import cli; "
                 "from orchestrator.analysis.frame import COLUMNS, DICTIONARY; "
                 "from orchestrator.results import dataset; "
                 "dataset.load_table(sys.argv[1], columns=COLUMNS, dictionary=DICTIONARY)"]
    print(f"{'nodes':>6} {'plan_s':>8} {'plan_MiB':>9} {'groups':>8} {'rows':>9} {'report_s':>9} {'report_MiB':>11} "
          f"{'flags':>6} {'read_proc_s':>12} {'x_read':>7} {'floor_s':>8} {'x_floor':>8} {'read_s':>7} "
          f"{'own_read_s':>11}")

    def line(nodes, wall_p, rss_p, groups, rows, root, *extra) -> None:
        wall_r, rss_r, flags = report(root, *extra)
        read_proc = best(lambda: timed([*read_cmd, f"{root}/bench", ",".join(REPORT_COLUMNS)]))[0]
        floor = best(lambda: timed([*floor_cmd, root]))[0]
        read_s = best(lambda: in_process(lambda: pq.read_table(f"{root}/bench", columns=REPORT_COLUMNS)))[0]
        own_s = best(lambda: in_process(lambda: dataset.load_table(root, columns=REPORT_COLUMNS,
                                                                   dictionary=DICTIONARY)))[0]
        print(f"{nodes:>6} {wall_p:8.2f} {rss_p:9.0f} {groups:>8} {rows:>9} {wall_r:9.2f} {rss_r:11.0f} {flags:>6} "
              f"{read_proc:12.2f} {wall_r / read_proc:7.1f} {floor:8.2f} {floor / read_proc:8.1f} {read_s:7.2f} "
              f"{own_s:11.2f}", flush=True)

    for nodes in map(int, a.nodes.split(",")):
        wall_p, rss_p, out = timed([*cli, "plan", "--inventory", f"{nodes}x8", "--patterns", PATTERNS])
        groups = out.strip().splitlines()[-1].split()[1]
        root = tempfile.mkdtemp(prefix="cbscale")
        rows = pairwise_dataset(root, nodes, [1 << 20, 1 << 28])
        line(nodes, wall_p, rss_p, groups, rows, root)
        shutil.rmtree(root)
    if a.faults:
        root = tempfile.mkdtemp(prefix="cbscale")
        pairwise_dataset(root, nodes, [1 << 20, 1 << 28], slow_every=97)
        print(f"faults, {nodes} nodes: every 97th pair at 0.3x")
        line(nodes, wall_p, rss_p, groups, rows, root)
        shutil.rmtree(root)
        root = tempfile.mkdtemp(prefix="cbscale")
        pairwise_dataset(root, nodes, [1 << 20, 1 << 28])
        expected = os.path.join(root, "_expected.yaml")
        with open(expected, "w") as f:
            f.write('- {topology: inter, busbw_gbps: 1000, source: "no pair reaches this"}\n')
        print(f"faults, {nodes} nodes: an expected value no pair reaches (--expected)")
        line(nodes, wall_p, rss_p, groups, rows, root, "--expected", expected)
        shutil.rmtree(root)
    if a.no_parquet:
        return

    # Parquet: a million rows written by the product's writer (one file per group of 1000 rows)
    # and read back as one dataset.
    from orchestrator.results.store import ResultStore

    root = tempfile.mkdtemp(prefix="cbpq")
    src = tempfile.mkdtemp(prefix="cbsrc")
    pairwise_dataset(src, 1024, [1 << 20, 1 << 28], files=1)
    rows = pq.read_table(f"{src}/bench").to_pylist()[:1_000_000]
    store = ResultStore(root, "bench")
    store.create()
    t0 = time.perf_counter()
    for g in range(0, len(rows), 1000):
        store.write_group(f"g{g // 1000}", rows[g : g + 1000])
    t_write = time.perf_counter() - t0
    t0 = time.perf_counter()
    df = dataset.load(root)
    t_read = time.perf_counter() - t0
    print(f"parquet: {len(rows)} rows written in {t_write:.1f}s ({len(rows) / t_write:,.0f} rows/s, "
          f"{len(rows) // 1000} files); read back in {t_read:.1f}s ({len(df) / t_read:,.0f} rows/s)")
    shutil.rmtree(root)
    shutil.rmtree(src)


if __name__ == "__main__":
    main()
