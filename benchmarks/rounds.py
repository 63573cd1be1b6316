"""What a round costs beyond its measurement: 16 fake Ray nodes (ray.cluster_utils.Cluster, one
CPU rank each), a pairwise sweep of a 1 KiB all_reduce (120 pairs in 15 rounds of 8 groups), and
the same with 1, 2, 4 and 8 concurrent groups per round. A round's overhead is its wall time minus
the time inside timed iterations (its longest group's).

    python benchmarks/rounds.py [--nodes 16]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from orchestrator.execution.outcome import Tally  # noqa: E402
from orchestrator.execution.pool import ActorPool  # noqa: E402
from orchestrator.execution.rows import RunRef  # noqa: E402
from orchestrator.execution.runner import Runner  # noqa: E402
from orchestrator.results.store import ResultStore  # noqa: E402
from orchestrator.sweep.inventory import from_ray_nodes  # noqa: E402
from orchestrator.sweep.planner import Group, Plan, circle_rounds  # noqa: E402
from orchestrator.sweep.spec import SweepSpec  # noqa: E402


def pairwise(nodes: int, offset: int = 0) -> Plan:
    rounds = []
    for r, pairs in enumerate(circle_rounds(nodes)):
        rounds.append(tuple(Group(f"b{offset + r}-g{i}", "pairwise", offset + r, (a, b)) for i, (a, b) in enumerate(pairs)))
    return Plan(tuple(rounds))


def summary(label: str, rounds: list[dict]) -> str:
    over = [r["wall_s"] - r["measured_s"] for r in rounds]
    return (f"{label:>26}: {len(rounds):3d} rounds, overhead median {statistics.median(over):.3f}s, "
            f"max {max(over):.3f}s, wall median {statistics.median(r['wall_s'] for r in rounds):.3f}s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=16)
    a = p.parse_args()
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    t0 = time.monotonic()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    for _ in range(a.nodes):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    print(f"{a.nodes} fake nodes up in {time.monotonic() - t0:.0f}s", flush=True)
    try:
        inv = from_ray_nodes(ray.nodes(), ranks_per_node=1)
        spec = SweepSpec(collectives=("all_reduce",), min_bytes=1024, max_bytes=1024, iters=5, warmup=1,
                         check_iters=1, group_timeout_s=60.0)
        pool = ActorPool(inv, {}, start_timeout_s=120)
        pool.start()
        out = tempfile.mkdtemp(prefix="cbrounds")
        store = ResultStore(out, "rounds")
        store.create()
        run = RunRef("rounds", dt.datetime.now(dt.timezone.utc))
        outcome = Tally()
        runner = Runner(spec, pool, store, "gloo", run, [outcome], {})
        runner.run(pairwise(a.nodes))
        print(summary(f"pairwise, {a.nodes // 2} groups/round", outcome.rounds), flush=True)
        offset = 1000
        for groups in (1, 2, 4, 8):
            if 2 * groups > a.nodes:
                break
            outcome.rounds.clear()
            runner.run(pairwise(2 * groups, offset))
            offset += 1000
            print(summary(f"{groups} concurrent group(s)", outcome.rounds), flush=True)
        pool.shutdown()
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
