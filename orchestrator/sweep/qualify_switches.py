"""Qualify's switches (issue 46): where a topology places the nodes under leaf switches, a leaf
whose pairs across it are slow while its pairs inside are fast has a slow uplink, and its nodes
are not named for it. Pure.

The rule is the report's (analysis/uplinks.py `slow_uplinks`, the one rule for both), over
qualify's probes of two nodes whose speed was judged: the pairs inside leaves (every round), and
across leaves the pairs of its rounds across leaves (every node across at once: each uplink
carries all its leaf's flows, as in a job), with the nodes that proved fast in some probe with
others. A probe that crosses a slow uplink (some member under one of its leaves, another not) is the uplink's
evidence and no node's (Judgement.states leaves it out): the pairs of a round that cross it share
it, so what one pair got says nothing of its nodes. Retests and gates keep off a slow uplink (a
suspect's partners from its own side, gates one per side) so that a node is judged on paths the
uplink does not limit."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from orchestrator.analysis.uplinks import slow_uplinks
from orchestrator.sweep import topology
from orchestrator.sweep.qualify_types import Outcome, Phase, Probe, Result


@dataclass(frozen=True)
class SlowUplink:
    """A switch verdict: the leaf (or the two leaves whose path is slow), its nodes as evidence."""

    switches: tuple[str, ...]
    nodes: tuple[int, ...]  # under its leaves: its evidence, none named for it
    across: int  # probes across it judged (in the rounds across leaves)
    inside: int  # probes inside its leaves judged
    busbw_gbps: float  # the median across it
    factor: float  # that over the median of the other probes
    under: tuple[frozenset[int], ...] = ()  # each switch's nodes (a switch above leaves: all below it); ()
    # where its switches are leaves, read from `leaves`

    def below(self, leaves: tuple[str | None, ...]) -> tuple[frozenset[int], ...]:
        """The nodes below each of its switches."""
        return self.under or tuple(frozenset(i for i, leaf in enumerate(leaves) if leaf == s) for s in self.switches)

    def crosses(self, leaves: tuple[str | None, ...], probe: Probe) -> bool:
        """Whether a probe's traffic goes through this uplink: members on both sides of one of its switches."""
        return any(len({n in under for n in probe.nodes}) == 2 for under in self.below(leaves))

    @property
    def detail(self) -> str:
        what = f"the uplink of {self.switches[0]}" if len(self.switches) == 1 else \
            f"the path between {' and '.join(self.switches)}"
        return (f"{what}: {self.across} pair probe(s) across it in the rounds across leaves, their median "
                f"{self.busbw_gbps:.4g} GB/s ({self.factor:.2f}x the others); {self.inside} inside at full speed")

    def to_json(self, names: list[str]) -> dict:
        """As qualify's JSON writes it; `names`: each node's name by its index."""
        return {"verdict": "slow_uplink", "switches": list(self.switches), "detail": self.detail,
                "nodes": [names[n] for n in self.nodes], "across": self.across, "inside": self.inside,
                "busbw_gbps": self.busbw_gbps, "factor": round(self.factor, 4)}


def said(switches: list[str], detail: str, nodes: int) -> str:
    """A slow uplink as qualify's line and watch's alert say it: a switch is no node's to drain."""
    name = ",".join(switches)
    return (f"slow_uplink {name}: {detail}; none of its {nodes} node(s) is named for it: check the uplink of "
            f"{name} (optics, cables, the port above it)")


def judged_pair(r: Result) -> bool:
    """A probe of two nodes whose speed was judged (a fresh pair or a retest)."""
    return len(r.probe.nodes) == 2 and r.probe.phase.kind is Phase.PAIRS and r.status in (
        Outcome.PASS, Outcome.SLOW) and r.reference is not None and r.busbw is not None


def find(judged: list[Result], leaves: tuple[str | None, ...], threshold: float,
         loaded: set[int] = frozenset(), parents: dict[str, str] | None = None) -> list[SlowUplink]:
    """The slow uplinks qualify's judged probes show (nodes without a leaf take no part; `parents`:
    switch -> the switch above, where the tree is deeper: the switches above leaves judged too). `loaded`:
    the indices (in `judged`) of the probes of the rounds across leaves; where there are any, the
    pairs across leaves judged are theirs alone: a pair at random shares its uplink with however many
    of its round happened to cross it, which says little of what the uplink carries."""
    pairs = [r for i, r in enumerate(judged) if judged_pair(r) and (
        not loaded or i in loaded or len({leaves[n] for n in r.probe.nodes}) == 1)]
    if not pairs or not any(leaves):
        return []
    proven = {n for r in judged if r.status is Outcome.PASS and r.reference is not None and len(r.probe.nodes) > 1
              for n in r.probe.nodes}
    leaf_of = {i: s for i, s in enumerate(leaves) if s is not None}
    a = np.array([r.probe.nodes[0] for r in pairs])
    b = np.array([r.probe.nodes[1] for r in pairs])
    low = np.array([r.status is Outcome.SLOW for r in pairs])
    busbw = np.array([r.busbw for r in pairs], dtype=float)
    return [SlowUplink(u.switches, u.nodes, u.across, u.inside, u.busbw_gbps, u.factor,
                       tuple(frozenset(topology.below(s, leaf_of, parents or {})) for s in u.switches))
            for u in slow_uplinks(leaf_of, a, b, low, busbw, proven, threshold, parents)]


def sides(leaves: tuple[str | None, ...], uplinks: list[SlowUplink], nodes, every: bool = False) -> list[list[int]]:
    """`nodes` split so that no part's probes cross a slow uplink (the gates' groups where one was
    found): under each of its leaves apart, the rest together; `every`: under each leaf apart, the
    nodes without one left out (the round of pairs inside leaves). One part without leaves."""
    if not any(leaves):
        return [] if every else [list(nodes)]
    cut = [] if every else [under for u in uplinks for under in u.below(leaves)]
    groups: dict = {}
    for n in nodes:  # by the set of slow uplinks' switches a node is below (a spine and a leaf in it: both)
        key = leaves[n] if every else tuple(i for i, under in enumerate(cut) if n in under) or None
        groups.setdefault(key, []).append(n)
    return [g for key, g in groups.items() if key is not None or not every]
