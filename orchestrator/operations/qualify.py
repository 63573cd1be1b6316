"""What a qualification takes besides its sweep, checked when made, and the sweep it measures:
qualify's own defaults and its one collective and one element type (`collbench qualify`,
`api.qualify` and `api.preflight`; the body that runs it is execution.qualifying)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from orchestrator.errors import UsageError
from orchestrator.judging.defaults import MIN_FRACTION, PEER_THRESHOLD
from orchestrator.operations.checks import check_min_fraction, check_threshold
from orchestrator.operations.sweeps import NONE, Sweeps
from orchestrator.sweep.spec import ALL, SweepSpec

# The sweep qualify takes (its command line's sweep options, its --config keys, the API's keyword
# options; any other is refused, from every face) and where its defaults differ from a run's: one
# collective at a few large sizes, few iterations, and a short deadline, since a probe is a health
# check, not a measurement to keep.
SWEEPS = Sweeps("collbench qualify",
                fields=("collectives", "dtypes", "min_bytes", "max_bytes", "step_factor", "iters", "warmup",
                        "check_iters", "backend", "ranks_per_node", "group_timeout_s", "deadline_rate_gbps", "output",
                        "address", "env", "expect_net", "nodes", "exclude"),
                defaults=MappingProxyType({"collectives": ("all_reduce",), "min_bytes": 1 << 20,
                                           "max_bytes": 16 << 20, "iters": 5, "warmup": 1, "group_timeout_s": 60.0}))
DEFAULTS = SWEEPS.defaults


@dataclass(frozen=True, kw_only=True)
class QualifyOptions:
    """How probes are judged, checked when made."""

    threshold: float = PEER_THRESHOLD
    """Without an expected value, a probe this fraction below what the fastest agreeing probes delivered (and
    below their noise) is slow."""
    min_fraction: float = MIN_FRACTION
    """With an expected value, a probe below this fraction of it is slow."""
    seed: int = 0
    """Seed of the random pairing."""
    expected: str | None = None
    """A YAML file of the user's expected values, over the shipped table."""

    def __post_init__(self) -> None:
        check_threshold(self.threshold)
        check_min_fraction(self.min_fraction)


def qualify_spec(base: SweepSpec | None = None, options: Mapping[str, Any] = NONE,
                 source: str = "collbench.api") -> SweepSpec:
    """The sweep a qualification measures (SWEEPS.spec: qualify's defaults without the caller's own
    sweep, never over it), checked for its one collective and element type."""
    return check_spec(SWEEPS.spec(base, options, source))


def check_spec(spec: SweepSpec) -> SweepSpec:
    """`spec`, refused unless it measures one collective and one element type: the verdicts
    compare like with like (`-d all` is every dtype the backend has)."""
    for name, values in (("--collectives", spec.collectives), ("--dtypes", spec.dtypes)):
        if len(values) != 1 or ALL in values:
            raise UsageError(f"{name} {','.join(values)}: qualify measures one (the verdicts compare like with like)")
    return spec
