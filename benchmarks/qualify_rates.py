"""Qualify's error rates, measured: the real `Qualifier` (through `qualify_simulator.simulate`) against
many seeded simulated clusters per fault, cluster size, noise and reference, counting healthy
nodes not passed (false positives) and culprits passed (false negatives).

Noise is one factor per probe (a fresh measurement each time): run-to-run variation dominates a
probe's result, which is already a median over its iterations, so the per-iteration spread is
folded into it. The profiles and where their widths come from are in `NOISE`'s docstrings and in
docs/PERFORMANCE.md ("Qualify's error rates").
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from benchmarks.qualify_simulator import Model, Noise, simulate
from orchestrator.judging.judge import PRIORS, Prior
from orchestrator.sweep.qualify_types import Outcome, Reference

BASE_GBPS = 40.0


@dataclass(frozen=True)
class NoiseProfile:
    name: str
    noise: Noise
    source: str
    prior: Prior  # the judge's prior qualify takes on such a platform (judging/judge.py)


NOISE = {
    p.name: p for p in (
        NoiseProfile("lab", Noise(0.06, "lognormal"),
                     "measured: 13 healthy pair probes of a 6-node `collbench lab --undeclared` (400 mbit/s, 8 MiB "
                     "all_reduce; 3 qualify runs and a pairwise run on this shared 2-core host) spread with a log "
                     "standard deviation of 5.6% (-13% to +3.5% of their median; per-iteration 5.1%)",
                     PRIORS[("gloo", True)]),
        NoiseProfile("gpu", Noise(0.02, "lognormal"),
                     "GPU fleets: 1-3% run to run (issue 21's figure; not measured here: no GPU cluster)",
                     PRIORS[("nccl", True)]),
        NoiseProfile("shared", Noise(0.27, "lognormal"),
                     "healthy intra-node gloo links on this shared host moved -34% to +93% between two runs a "
                     "minute apart (REFERENCE.md): log-normal, those taken as about +-2 sigma",
                     PRIORS[("gloo", True)]),
    )
}

# fault -> (how a culprit is planted, how many); a culprit factor multiplies its probes' busbw
FAULTS = ("none", "slow 2x", "slow 4x", "slow NIC 2x", "two slow 2x", "hang", "intermittent 2x")
# common faults: a share of the nodes at a quarter (their NICs, or the nodes themselves), and one
# node at half speed in a share of its probes
SHARES = (0.1, 0.3, 0.5, 0.7, 0.9)
COMMON = (*(f"NIC 4x on {s:.0%}" for s in SHARES), *(f"node 4x on {s:.0%}" for s in SHARES),
          *(f"intermittent 2x in {s:.0%}" for s in (0.25, 0.5, 0.75)))


def plant(fault: str, n: int, rng: random.Random, noise: Noise, seed: int, ranks_per_node: int = 1) -> Model:
    """A model of n nodes with `fault` planted on random nodes. A slow NIC is one rail of one node
    at half speed: the collective waits for its slowest rail, so every probe that leaves the node
    runs at half speed, while the node alone does not. "X on P%": round(P n) nodes (at least one,
    all but one at most); "intermittent 2x in P%": one node at half speed in P% of its probes."""
    kw: dict = {}
    common = re.fullmatch(r"(NIC|node) 4x on (\d+)%", fault)
    flapping = re.fullmatch(r"intermittent 2x in (\d+)%", fault)
    if common:
        count = min(n - 1, max(1, round(int(common.group(2)) / 100 * n)))
        culprits = rng.sample(range(n), count)
        kw["nic_slow" if common.group(1) == "NIC" else "slow"] = {c: 0.25 for c in culprits}
        return Model(n, ranks_per_node, BASE_GBPS, noise=noise, seed=seed, **kw)
    if flapping:
        kw["intermittent_share"] = int(flapping.group(1)) / 100
        fault = "intermittent 2x"
    culprits = rng.sample(range(n), min(n, 2 if fault == "two slow 2x" else 1 if fault != "none" else 0))
    if fault in ("slow 2x", "two slow 2x"):
        kw["slow"] = {c: 0.5 for c in culprits}
    elif fault == "slow 4x":
        kw["slow"] = {c: 0.25 for c in culprits}
    elif fault == "slow NIC 2x":
        kw["nic_slow"] = {c: 0.5 for c in culprits}
    elif fault == "hang":
        kw["hang"] = set(culprits)
    elif fault == "intermittent 2x":
        kw["intermittent"] = {c: 0.5 for c in culprits}
    return Model(n, ranks_per_node, BASE_GBPS, noise=noise, seed=seed, **kw)


@dataclass(frozen=True)
class Rates:
    clusters: int
    healthy: int  # healthy nodes, over all clusters
    culprits: int
    false_pos: int  # healthy nodes not passed
    false_neg: int  # culprits passed
    unjudged: int  # clusters whose speed could not be judged (no reference)
    max_rounds: int

    @property
    def fp_rate(self) -> float:
        return self.false_pos / self.healthy if self.healthy else 0.0

    @property
    def fn_rate(self) -> float:
        return self.false_neg / self.culprits if self.culprits else 0.0


def measure(fault: str, n: int, noise: Noise, clusters: int, expected: bool, seed: int = 0,
            threshold: float = 0.10, prior: Prior | None = None) -> Rates:
    """Run `clusters` seeded clusters of n nodes with the fault; count the qualifier's errors
    (`prior`: the judge's, default the Qualifier's)."""
    rng = random.Random(f"{seed}-{fault}-{n}-{noise}-{expected}")
    reference = Reference(pair=BASE_GBPS, gate=BASE_GBPS) if expected else None
    healthy = culprits = fp = fn = unjudged = max_rounds = 0
    for _ in range(clusters):
        model = plant(fault, n, rng, noise, seed=rng.randrange(1 << 30))
        planted = set(model.slow) | set(model.nic_slow) | model.hang | set(model.intermittent)
        q = simulate(model, threshold, reference, prior=prior)
        named = {i for i, v in q.verdicts.items() if v is not Outcome.PASS}
        healthy += n - len(planted)
        culprits += len(planted)
        fp += len(named - planted)
        fn += len(planted - named)
        unjudged += bool(q.unjudged)
        max_rounds = max(max_rounds, q.rounds)
    return Rates(clusters, healthy, culprits, fp, fn, unjudged, max_rounds)
