"""A simulated cluster for qualify: nodes with planted faults and measurement noise, and the loop
that drives the real `Qualifier` against it (the same calls `collbench qualify` makes)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Literal

from orchestrator.judging.judge import Prior
from orchestrator.sweep.qualify import Qualifier
from orchestrator.sweep.qualify_types import Outcome, Probe, Reference, Result
from orchestrator.sweep.topology import path


@dataclass(frozen=True)
class Noise:
    """Variation of one probe's busbw from one measurement to the next, as a factor: uniform in
    [1 - width, 1 + width], or log-normal exp(N(0, width)) (skewed up, as shared hosts move)."""

    width: float
    shape: Literal["uniform", "lognormal"] = "uniform"

    def __post_init__(self) -> None:
        if not 0 <= self.width < 1 or self.shape not in ("uniform", "lognormal"):
            raise ValueError(f"noise: width {self.width} must be in [0, 1), shape {self.shape!r} uniform or lognormal")

    def factor(self, rng: random.Random) -> float:
        if self.shape == "uniform":
            return 1 + rng.uniform(-self.width, self.width)
        return math.exp(rng.gauss(0.0, self.width))


@dataclass
class Model:
    """A cluster for the simulator: a node's speed multiplies the busbw of every probe it is in
    (`slow`: the node itself; `nic_slow`: only probes that leave the node; `scale_slow`: only
    probes of more than two nodes; `intermittent`: in a probe with probability one half);
    `hang` nodes stop every probe they are in (and do not answer a ping); an intermittent node is
    slow in a probe with probability `intermittent_share`). Leaf switches (`leaves`, each node's):
    a leaf in `uplink` (or a switch above leaves, `parents`) carries that factor times its nodes'
    links to the rest, shared by the probes
    of a round that cross it (members on both sides), unequally (log-normal, sigma `share_sigma`;
    a probe across two slow uplinks limited by the smaller share), as the lab's measured
    (benchmarks/uplink_errors.py `--contention`); a healthy uplink carries its leaf's links at full
    rate."""

    n_nodes: int
    ranks_per_node: int = 8
    base_gbps: float = 40.0
    slow: dict[int, float] = field(default_factory=dict)
    nic_slow: dict[int, float] = field(default_factory=dict)
    hang: set[int] = field(default_factory=set)
    scale_slow: dict[int, float] = field(default_factory=dict)
    intermittent: dict[int, float] = field(default_factory=dict)
    intermittent_share: float = 0.5
    noise: Noise | float = 0.02  # a float: uniform of that width
    seed: int = 0
    leaves: tuple[str, ...] = ()
    uplink: dict[str, float] = field(default_factory=dict)  # a leaf, or a switch above leaves (`parents`)
    share_sigma: float = 0.15
    parents: dict[str, str] = field(default_factory=dict)  # switch -> the switch above it

    def __post_init__(self) -> None:
        if not isinstance(self.noise, Noise):
            self.noise = Noise(float(self.noise))

    def run(self, probe: Probe, rng: random.Random) -> Result:
        stuck = tuple(n for n in probe.nodes if n in self.hang)
        if stuck:
            return Result(probe, Outcome.HANG, None, stuck, "ranks did not answer")
        speeds = [self.slow.get(n, 1.0) for n in probe.nodes]
        speeds += [f for n in probe.nodes if (f := self.intermittent.get(n)) and rng.random() < self.intermittent_share]
        if len(probe.nodes) > 1:
            speeds += [self.nic_slow.get(n, 1.0) for n in probe.nodes]
        if len(probe.nodes) > 2:
            speeds += [self.scale_slow.get(n, 1.0) for n in probe.nodes]
        return Result(probe, Outcome.PASS, self.base_gbps * min(speeds) * self.noise.factor(rng))

    def run_round(self, probes: list[Probe], rng: random.Random) -> list[Result]:
        """A round's probes at once: each as `run`, then limited by its share of each slow uplink it crosses."""
        results = [self.run(p, rng) for p in probes]
        limit = [1.0] * len(probes)  # the tightest share of a slow uplink each probe crosses (two: the smaller)
        for switch, factor in self.uplink.items():
            below = {n for n, leaf in enumerate(self.leaves) if switch in path(leaf, self.parents)}
            crossing = [i for i, p in enumerate(probes) if results[i].status is Outcome.PASS
                        and len({n in below for n in p.nodes}) == 2]
            fair = factor * len(below) / max(len(crossing), 1)
            if fair >= 1:
                continue
            shares = [math.exp(rng.gauss(0.0, self.share_sigma)) for _ in crossing]
            for i, share in zip(crossing, shares):
                limit[i] = min(limit[i], fair * share * len(shares) / sum(shares))
        return [Result(p, Outcome.PASS, r.busbw * x) if x < 1.0 else r for p, r, x in zip(probes, results, limit)]


def simulate(model: Model, threshold: float = 0.10, reference: Reference | None = None,
             min_fraction: float = 0.8, prior: Prior | None = None, leaves: tuple[str, ...] | None = None,
             stop_after: int | None = None) -> Qualifier:
    """Qualify the model's cluster; the returned qualifier holds verdicts and the rounds used.
    `prior`: how far apart the judge expects healthy probes (default: the Qualifier's, gloo across nodes);
    `leaves`: the topology qualify is given (default: the model's; () for none); `stop_after`: stopped
    after that many rounds, as SIGUSR1 stops `collbench qualify` (Qualifier.stop)."""
    q = Qualifier(model.n_nodes, model.ranks_per_node, threshold, reference or Reference(), model.seed, min_fraction,
                  leaves=leaves if leaves is not None else model.leaves,
                  parents=model.parents if leaves is None else {}, **({"prior": prior} if prior else {}))
    rng = random.Random(model.seed + 1)
    while probes := q.next_round():
        if stop_after is not None and q.rounds > stop_after:
            q.stop("stopped by the benchmark", unrun=probes)
            break
        q.record(model.run_round(probes, rng))
    return q
