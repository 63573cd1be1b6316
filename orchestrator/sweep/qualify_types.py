"""Qualify's vocabulary: the phases of a qualification, one outcome from a probe's result to a
node's verdict, what a probe is and what came back, the line a probe is judged by and what a node's
probes say so far. Pure and torch-free."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from workloads.messages import Status


class Phase(str, Enum):
    """The step of a qualification that proposed a probe (the rows' `phase` column)."""

    INTRA = "intra"  # every node alone (its ranks together)
    PAIRS = "pairs"  # rounds of fresh pairs (the circle method over a shuffled order)
    RETEST = "retest"  # a suspect with partners that passed
    GATE = "gate"  # every node still passing, in one group
    BISECT = "bisect"  # halves of a slow or hung gate

    @property
    def kind(self) -> Phase:
        """The phase whose reference and deadline this one shares: retests are pairs with known-good
        partners, bisections are smaller gates."""
        return _KIND.get(self, self)  # asked a million times a simulated qualification: one lookup


_KIND = {Phase.RETEST: Phase.PAIRS, Phase.BISECT: Phase.GATE}


class Outcome(str, Enum):
    """How a probe ended and, the same words, a node's verdict: a node passes, or is named with
    the outcome of the probes that condemned it."""

    PASS = "pass"  # a probe: completed at full speed (or not judged: its reference is None)
    SLOW = "slow"  # below its reference (set by the qualifier, never by the caller)
    INTERMITTENT = "intermittent"  # a verdict only: slow in some of a node's own probes, fast in others
    HANG = "hang"  # did not finish by its deadline
    FAILED = "failed"  # a rank raised, died, or returned wrong results
    LOST = "lost"  # a node left the cluster

    @classmethod
    def of_run(cls, status: Status) -> Outcome:
        """A group's run status (the rows' `status`) as a probe's outcome, before judging its speed."""
        return {Status.OK: cls.PASS, Status.TIMEOUT: cls.HANG}.get(status, cls.FAILED)


Verdict = Outcome  # a node's verdict is an outcome (the name commands and tests use)
# A passing node's detail where none of its probes could be judged for speed
UNJUDGED = "completed; its speed was not judged (nothing to compare it with: give --expected)"


@dataclass(frozen=True)
class NodeVerdict:
    """A node's verdict, as operators know the node, with the probes that decided it."""

    node: str  # its IP address
    host: str
    node_id: str  # Ray's
    verdict: Outcome
    detail: str
    evidence: tuple[dict, ...]
    """Each of its probes, in order: phase, group_id, nodes (IPs), status, busbw_gbps, reference_gbps, detail."""
    name: str | None = None  # its name in the scheduler (Slurm's, Kubernetes'): what an operator drains

    @property
    def passed(self) -> bool:
        return self.verdict is Outcome.PASS

    def deciding(self) -> dict:
        """The probe that decided the verdict: a failing node's last probe that did not pass, a
        passing node's last that passed (else its last probe; {} where it has none)."""
        wanted = (lambda e: e["status"] == Outcome.PASS.value) if self.passed else \
            (lambda e: e["status"] != Outcome.PASS.value)
        return next((e for e in reversed(self.evidence) if wanted(e)), self.evidence[-1] if self.evidence else {})

    def to_json(self) -> dict:
        """As `collbench qualify --format json` writes it."""
        return {"node": self.node, "host": self.host, "node_id": self.node_id, "name": self.name,
                "verdict": self.verdict.value, "detail": self.detail, "evidence": list(self.evidence)}


@dataclass(frozen=True)
class Probe:
    phase: Phase
    nodes: tuple[int, ...]  # the suspect first in a retest

    def __post_init__(self) -> None:
        if not self.nodes or len(set(self.nodes)) != len(self.nodes):
            raise ValueError(f"a probe needs distinct nodes, got {self.nodes}")


@dataclass(frozen=True)
class Result:
    probe: Probe
    status: Outcome
    busbw: float | None = None  # GB/s at the largest size (None when it did not complete)
    culprits: tuple[int, ...] = ()  # nodes whose ranks did not answer, died or left
    detail: str = ""
    reference: float | None = None  # what it was judged against (GB/s), set by the qualifier
    group_id: str = ""  # the caller's name for the probe's run (collbench: its group, in the rows)

    def __post_init__(self) -> None:
        if self.status is Outcome.PASS and self.busbw is None:
            raise ValueError(f"a completed probe needs its busbw: {self.probe}")
        if not set(self.culprits) <= set(self.probe.nodes):
            raise ValueError(f"culprits {self.culprits} are not among the probe's nodes {self.probe.nodes}")


@dataclass(frozen=True)
class Reference:
    """What a healthy probe reaches, where known (from expected values), in GB/s."""

    intra: float | None = None
    pair: float | None = None
    gate: float | None = None

    def of(self, phase: Phase) -> float | None:
        return {Phase.INTRA: self.intra, Phase.PAIRS: self.pair, Phase.GATE: self.gate}[phase.kind]


@dataclass
class Deadlines:
    """Per-phase deadlines from what probes took: a phase's stage deadline is `margin` times the
    longest probe of its kind so far (retests are pairs, bisections gates), at least `floor_s`
    and at most `ceiling_s` (--group-timeout), which also applies while a kind has not run yet."""

    ceiling_s: float
    floor_s: float = 10.0
    margin: float = 5.0
    _longest: dict[Phase, float] = field(default_factory=dict)

    def took(self, phase: Phase, wall_s: float) -> None:
        self._longest[phase.kind] = max(self._longest.get(phase.kind, 0.0), wall_s)

    def limit_s(self, phase: Phase) -> float:
        longest = self._longest.get(phase.kind)
        if longest is None:
            return self.ceiling_s
        return min(self.ceiling_s, max(self.floor_s, self.margin * longest))


@dataclass(frozen=True)
class Cut:
    """A reference (GB/s) and the fraction of it a healthy probe reaches."""

    reference_gbps: float
    fraction: float

    def slow(self, busbw_gbps: float) -> bool:
        return busbw_gbps < self.fraction * self.reference_gbps

    def decisive(self, busbw_gbps: float) -> bool:
        """Below the line by more than twice the allowed drop: no noise the level saw explains it."""
        return busbw_gbps < (2 * self.fraction - 1) * self.reference_gbps


@dataclass
class NodeState:
    """What a node's probes say so far."""

    proven: bool = False  # in a fast probe with others
    verdict: Outcome | None = None  # decided: slow, intermittent, hang, failed
    needs: bool = False  # a measurement with partners that proved fast (or alone): of class `needs_class`
    needs_class: str = "pair"  # alone, pair (one partner) or group (two partners)
    unresolved: bool = False  # slow or hung with others and never measured on its own
    slow_of: dict[str, tuple[int, int]] = field(default_factory=dict)  # class -> (own slow, own probes)
    why: str = ""  # what decided the verdict, in words

    @property
    def suspicion(self) -> float:
        """The share of its own probes that read slow (0 without any)."""
        slow, total = sum(k for k, _ in self.slow_of.values()), sum(m for _, m in self.slow_of.values())
        return slow / total if total else 0.0

    @property
    def good(self) -> bool:
        """A partner for others' retests: proved fast, nothing against it."""
        return self.proven and self.verdict is None and not self.needs and not any(k for k, _ in self.slow_of.values())
