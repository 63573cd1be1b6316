"""A rank whose CPU is held down (a cgroup quota of a twentieth of a CPU, as a noisy neighbour leaves
it) on the shared `pair` lab (2 nodes of 3 CPU ranks): named by its node and local rank among
healthy ranks, and not called a straggler. On gloo every member of a blocking collective works
through the call, so a starved rank slows its whole group (each member's own time stays its
group's) rather than arriving late: the pair comparisons inside its node find it (slow_gpu),
while the straggler rule (the member with the shortest own time) is kept for lateness between
calls, as a GPU rank launching late shows it (tests/unit/test_analysis.py; docs/PERFORMANCE.md, Stragglers)."""

from __future__ import annotations

import json
import threading
import time

import pandas as pd
import pytest

from orchestrator.lab import cluster as labmod
from tests.faults import CpuHold, worker_pids
from tests.helpers import run_cli

pytestmark = pytest.mark.lab


def test_a_rank_with_its_cpu_held_down_is_named_by_node_and_local_rank(pair, tmp_path):
    why = CpuHold.available()
    if why:
        pytest.skip(why)
    lab = pair
    hold, held, in_hold, done = CpuHold(0.05), [], set(), threading.Event()
    try:
        ns = labmod.load(lab.name).namespaces[1]
        # the pool's lab is shared: an actor of an earlier test's run may still be exiting there
        earlier = set(worker_pids())

        def hold_first_worker() -> None:  # the first rank of this run that starts on node 1
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not held:
                mine = sorted(set(labmod.netns_pids(ns)) & (set(worker_pids()) - earlier))
                if mine:
                    hold.hold(mine[0])
                    held.append(mine[0])
                time.sleep(0.1)
            while held and not done.wait(1.0):  # what the held cgroup holds, for a failure's message
                in_hold.update(hold.members())

        holder = threading.Thread(target=hold_first_worker, daemon=True)
        holder.start()
        out = tmp_path / "results"
        proc = run_cli(["run", "--address", lab.address, "--ranks-per-node", "3", "--patterns",
                        "intra,inter,pairwise,intra-pairwise", "--collectives", "all_reduce,all_gather",
                        "-b", "64K", "-e", "1M", "-f", "4", "-n", "10", "--output", str(out)], env=lab.env(),
                       timeout=600)
        done.set()
        holder.join(timeout=5)
        assert proc.returncode == 0 and held, proc.stderr[-3000:]
        df = pd.read_parquet(out)
        run_pids = {int(p) for pids in df.pids for p in pids}
        # the starved rank is the one the kernel's cgroup held while the run ran (sampled each second)
        starved = sorted(in_hold & run_pids)
        seen = f"held pid {held[0]}; the cgroup held {sorted(in_hold)} of the run's {sorted(run_pids)}"
        assert starved == [held[0]], seen
        row = df[df.pids.apply(lambda p: held[0] in list(p))].iloc[0]
        j = list(row.pids).index(held[0])
        node_ip, local = row.node_ips[j], int(row.local_ranks[j])
        rep = json.loads(run_cli(["report", str(out), "--format", "json"]).stdout)
        # the lab declares its line rate: a group the starved rank slowed may read below it, which is
        # the expected-value verdict's question (tests/unit/test_expected.py), not this test's
        found = {(f["kind"], tuple(f["nodes"]), tuple(f["ranks"])) for f in rep["flags"]
                 if f["kind"] != "below_expected"}
        seen += f" (local {local} on {node_ip}); flags {rep['flags']}"
        assert ("slow_gpu", (node_ip,), (local,)) in found, seen
        # every other flag is a shape that holds it: its node's pairs with it, its rail (the groups
        # across nodes of its local rank)
        for kind, nodes, ranks in found:
            assert node_ip in nodes and (local in ranks or kind == "slow_node"), seen
        assert not [f for f in found if f[0].startswith("straggler")], rep["flags"]
    finally:
        hold.release()
