"""How many rounds `collbench qualify` needs, and what that costs at 1,024 nodes.

Part 1 runs the qualifier itself (orchestrator.sweep.qualify, the code `collbench qualify` runs)
against simulated clusters of N = 16 ... 4,096 nodes of 8 ranks with planted faults, and prints
the rounds used beside the bound LOOKS + 2 log2 N + 4 (LOOKS fresh pair rounds, then retests, gates
and bisections), and whether every verdict was right.

Part 2 projects the wall time at 1,024 nodes from the rounds of part 1 and a per-round cost:
the driver's overhead for a round of G concurrent groups, a + b G (fitted to benchmarks/rounds.py
on this machine: 1, 2, 4, 8 concurrent groups), plus what each probe itself takes on GPUs (the
process group's set-up and the measurement, given as options because they come from the
platform, not from collbench), plus, in a round that hangs, its deadline and the ping.

    python benchmarks/qualify_sim.py [--overhead-a 0.030] [--overhead-b 0.009] ...
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.qualify_simulator import Model, simulate
from orchestrator.sweep.qualify import LOOKS, Deadlines, Outcome, Probe, Qualifier, Reference, Result

SIZES = (16, 64, 256, 1024, 4096)
PING_S = 3.0  # execution.pool.ActorPool.silent


def scenarios(n: int) -> dict[str, tuple[Model, dict[int, str]]]:
    """name -> (model, the verdicts it must get); planted nodes are neither first nor last."""
    a, b, c = n // 3, n // 2 + 1, n - 5
    return {
        "healthy": (Model(n), {}),
        "1 slow NIC": (Model(n, nic_slow={a: 0.5}), {a: "slow"}),
        "1 slow node": (Model(n, slow={a: 0.7}), {a: "slow"}),
        "1 hang": (Model(n, hang={c}), {c: "hang"}),
        "2 slow + 1 hang": (Model(n, nic_slow={a: 0.5, b: 0.6}, hang={c}), {a: "slow", b: "slow", c: "hang"}),
        "slow only at scale": (Model(n, scale_slow={n // 5 + 1: 0.5}), {n // 5 + 1: "slow"}),
    }


def run_rounds(model: Model) -> list[tuple[list[Probe], list[Result]]]:
    """Simulate, keeping each round's probes and results (for the cost model)."""
    q = Qualifier(model.n_nodes, model.ranks_per_node, 0.10, Reference(), model.seed)
    rng = random.Random(model.seed + 1)
    rounds = []
    while probes := q.next_round():
        results = [model.run(p, rng) for p in probes]
        rounds.append((probes, results))
        q.record(results)
    return rounds


def probe_s(p: Probe, a: argparse.Namespace) -> float:
    """Set-up and measurement of one probe on GPUs (the options), by its number of nodes."""
    return a.setup_s * (1 + math.log2(len(p.nodes)) * a.setup_growth) + a.measure_s


def round_cost(probes: list[Probe], results: list[Result], a: argparse.Namespace, deadlines: Deadlines) -> float:
    """Driver overhead, plus the longest probe, or (a probe hung) the round's deadline and the ping."""
    limit = max(deadlines.limit_s(p.phase) for p in probes)  # what collbench qualify sets for the round
    for r in results:
        if r.status is not Outcome.HANG:
            deadlines.took(r.probe.phase, probe_s(r.probe, a))
    hung = any(r.status is Outcome.HANG for r in results)
    longest = limit + PING_S if hung else max(probe_s(p, a) for p in probes)
    return a.overhead_a + a.overhead_b * len(probes) + longest


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--overhead-a", type=float, default=0.030, help="driver overhead of a round, s (fit to rounds.py)")
    p.add_argument("--overhead-b", type=float, default=0.009, help="and per concurrent group, s (fit to rounds.py)")
    p.add_argument("--setup-s", type=float, default=2.0, help="NCCL communicator set-up of a pair, s")
    p.add_argument("--setup-growth", type=float, default=1.0,
                   help="set-up grows by this x log2(nodes) per doubling of a group (1: 1,024 nodes = 11x a pair)")
    p.add_argument("--measure-s", type=float, default=1.0, help="measuring 1M-16M all_reduce (5+1+1 iterations), s")
    p.add_argument("--ceiling-s", type=float, default=60.0, help="--group-timeout (qualify's default)")
    a = p.parse_args()

    print(f"Part 1: rounds used (8 ranks per node; bound {LOOKS} + 2 log2 N + 4)\n")
    names = list(scenarios(16))
    print("| scenario | " + " | ".join(f"N={n}" for n in SIZES) + " |")
    print("|---|" + "---:|" * len(SIZES))
    wrong = []
    for name in names:
        cells = []
        for n in SIZES:
            model, want = scenarios(n)[name]
            q = simulate(model)
            got = {i: v.value for i, v in q.verdicts.items() if v is not Outcome.PASS}
            if got != want:
                wrong.append(f"{name} at N={n}: {got} != {want}")
            cells.append(f"{q.rounds}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"| bound {LOOKS} + 2 log2 N + 4 | " + " | ".join(f"{LOOKS + 2 * math.log2(n) + 4:.0f}" for n in SIZES) + " |")
    print("\nverdicts: " + ("all right" if not wrong else "WRONG: " + "; ".join(wrong)))

    n = 1024
    print(f"\nPart 2: projected wall time at {n} nodes (overhead {a.overhead_a} + {a.overhead_b} x groups s per "
          f"round; probe set-up {a.setup_s} s for a pair, x(1 + {a.setup_growth} log2 nodes); measuring "
          f"{a.measure_s} s; a hung round costs its deadline + {PING_S:.0f} s ping)\n")
    print("| scenario | rounds | driver overhead s | projected wall s |")
    print("|---|---:|---:|---:|")
    for name in names:
        model, _ = scenarios(n)[name]
        rounds = run_rounds(model)
        deadlines = Deadlines(a.ceiling_s)
        overhead = sum(a.overhead_a + a.overhead_b * len(probes) for probes, _ in rounds)
        wall = sum(round_cost(probes, results, a, deadlines) for probes, results in rounds)
        print(f"| {name} | {len(rounds)} | {overhead:.1f} | {wall:.0f} |")


if __name__ == "__main__":
    main()
