"""How often the straggler rule is wrong: false positives (a healthy rank or node named) and false
negatives (a late rank missed), over simulated runs driven through the real rule
(orchestrator.analysis.stragglers.flags, what `collbench report` runs) on Frames built from the
one Parquet schema.

A run is the real planner's groups for N nodes x R ranks (patterns intra, inter, pairwise; two
sizes of all_reduce). Each rank entry's own time is its group's time times exp(e), e drawn from the
healthy residuals measured on the lab (benchmarks/data/rank_time_residuals.json: robust sigma
3.4-5.2%, 1st-99th percentile -28%..+24%), or from those residuals times `--noise-scale`. One rank
(the culprit) arrives late in every group it is in: its own time is f x its peers' (f = 0.9, 0.7,
0.5, 0.25: the others waited 10%..75% of the call for it).

    python benchmarks/straggler_errors.py [--trials 20] [--seed 0] [--noise-scale 1]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from orchestrator.analysis import stragglers  # noqa: E402
from orchestrator.analysis.frame import Frame  # noqa: E402
from orchestrator.results.schema import ROW_SCHEMA  # noqa: E402
from orchestrator.sweep.inventory import from_description  # noqa: E402
from orchestrator.sweep.planner import make_plan  # noqa: E402
from orchestrator.sweep.spec import SweepSpec  # noqa: E402

SHAPES = [(2, 2), (3, 1), (4, 1), (4, 2), (8, 2), (16, 4), (64, 2)]
LATENESS = [0.9, 0.7, 0.5, 0.25]
SIZES = [1 << 16, 1 << 20]
THRESHOLD = 0.10  # the report's default
RESIDUALS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "rank_time_residuals.json")


def plan_groups(nodes: int, rpn: int) -> list[tuple[str, str, tuple[int, ...]]]:
    plan = make_plan(SweepSpec(patterns=("intra", "inter", "pairwise")), from_description(f"{nodes}x{rpn}"))
    return [(g.group_id, g.pattern, g.ranks) for g in plan.groups if len(g.ranks) >= 2]


def frame(groups, rpn: int, rng, residuals: np.ndarray, culprit: int | None, f: float) -> Frame:
    cols: dict[str, list] = {k: [] for k in ("run_id", "collective", "backend", "status", "world_size", "msg_bytes",
                                             "group_id", "pattern", "topology", "ranks", "node_ips", "hosts",
                                             "local_ranks", "rank_time_us", "busbw_gbps", "time_us", "dtype", "op")}
    for gid, pattern, ranks in groups:
        nodes = [r // rpn for r in ranks]
        for size in SIZES:
            base = 20.0 + size / 1e3
            own = base * np.exp(rng.choice(residuals, len(ranks)))
            if culprit in ranks:
                own[ranks.index(culprit)] *= f
            for k, v in (("run_id", "sim"), ("collective", "all_reduce"), ("backend", "gloo"), ("status", "ok"),
                         ("world_size", len(ranks)), ("msg_bytes", size), ("group_id", gid), ("pattern", pattern),
                         ("topology", "intra" if len(set(nodes)) == 1 else "inter"), ("ranks", list(ranks)),
                         ("node_ips", [f"10.0.{n // 250}.{n % 250}" for n in nodes]),
                         ("hosts", [f"node{n}" for n in nodes]), ("local_ranks", [r % rpn for r in ranks]),
                         ("rank_time_us", own.tolist()), ("busbw_gbps", size / own.max() / 1e3),
                         ("time_us", float(own.max())), ("dtype", "float32"), ("op", "sum")):
                cols[k].append(v)
    n = len(cols["run_id"])
    table = pa.table({fld.name: pa.array(cols.get(fld.name, [None] * n), type=fld.type) for fld in ROW_SCHEMA},
                     schema=ROW_SCHEMA)
    return Frame(table)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--noise-scale", type=float, default=1.0)
    a = p.parse_args()
    rng = np.random.default_rng(a.seed)
    residuals = np.array(json.load(open(RESIDUALS))["log_ratios"]) * a.noise_scale
    t0 = time.perf_counter()
    print(f"noise: lab residuals x{a.noise_scale:g}; {a.trials} trials per cell; threshold {THRESHOLD}")
    print(f"{'shape':>8} {'ranks':>6} {'healthy FP ranks':>17} {'FP nodes':>9} "
          + " ".join(f"{'miss ' + format(f, 'g') + 'x':>10}" for f in LATENESS))
    for nodes, rpn in SHAPES:
        groups = plan_groups(nodes, rpn)
        world = nodes * rpn
        fp_ranks = fp_nodes = healthy = 0
        for _ in range(a.trials):
            found = stragglers.flags(frame(groups, rpn, rng, residuals, None, 1.0), THRESHOLD)
            fp_ranks += sum(1 for x in found if x.kind == "straggler")
            fp_nodes += sum(1 for x in found if x.kind == "straggler_node")
            healthy += world
        misses = []
        for f in LATENESS:
            missed = 0
            for _ in range(a.trials):
                culprit = int(rng.integers(world))
                found = stragglers.flags(frame(groups, rpn, rng, residuals, culprit, f), THRESHOLD)
                named = {r for x in found if x.kind == "straggler" for r in x.ranks}
                missed += culprit not in named
            misses.append(f"{missed}/{a.trials}")
        print(f"{nodes:>4}x{rpn:<3} {world:>6} {fp_ranks:>8}/{healthy:<8} {fp_nodes:>4}/{a.trials * nodes:<4} "
              + " ".join(f"{m:>10}" for m in misses), flush=True)
    print(f"({time.perf_counter() - t0:.0f}s)")


if __name__ == "__main__":
    main()
