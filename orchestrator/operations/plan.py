"""`collbench plan` and `api.plan`: the rounds and groups a run would form and how many
measurements it would make, against the live cluster or a described inventory; creates no actor."""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.operations.sweeps import Sweeps
from orchestrator.results.history import earlier_rates
from orchestrator.results.location import check_writable
from orchestrator.sweep.estimate import DEFAULTS, Estimate, estimate
from orchestrator.sweep.inventory import Inventory, from_description
from orchestrator.sweep.planner import Plan, build_cases, check_plan, make_plan
from orchestrator.sweep.spec import DOMAIN_PATTERNS, SweepSpec, auto_backend, for_backend

# What plan reads: the groups (patterns, group sizes, concurrency), the cases counted per group
# (collectives, dtypes, ops, sizes), --root's check, and the live cluster (address, CPU ranks, and
# the backend, which decides the dtypes); and for the estimate of how long the run would take, the
# iterations and the output folder (an earlier run there on the same nodes gives its rates).
SWEEPS = Sweeps("collbench plan", fields=("collectives", "dtypes", "ops", "min_bytes", "max_bytes", "step_factor",
                                          "root", "backend", "patterns", "group_sizes", "concurrent",
                                          "ranks_per_node", "address", "iters", "warmup", "check_iters", "output"))


@dataclass(frozen=True)
class PlanOptions:
    """A plan's sweep, and `inventory` (NxR[/D]: N nodes of R GPUs, or R CPU ranks with `cpu`, in
    NVLink domains of D nodes) to plan for a described cluster instead of the live one; a bad
    description is refused when the options are made."""

    sweep: SweepSpec = field(default_factory=SweepSpec)
    inventory: str | None = None

    def __post_init__(self) -> None:
        if self.inventory is not None:
            from_description(self.inventory)


@dataclass(frozen=True)
class Planned:
    """What a run with these options would do: its plan, on which nodes, with the sweep as the
    backend decides it, and how many measurements (a case and size in one group each)."""

    plan: Plan
    inventory: Inventory
    sweep: SweepSpec
    measurements: int
    estimate: Estimate


def plan(options: PlanOptions) -> Planned:
    spec = options.sweep
    check_writable(spec.output)  # what a run there would refuse (its earlier runs give the estimate's rates)
    inv = _inventory(options)
    backend = auto_backend(spec.backend, inv.use_gpus)
    spec = for_backend(spec, backend)
    made = make_plan(spec, inv)
    check_plan(spec, made)
    per_size: dict[int, int] = {}
    for g in made.groups:
        n = len(g.ranks)
        if n not in per_size:
            per_size[n] = sum(len(c.counts) for c in build_cases(spec, n))
    rates = earlier_rates(spec.output, backend, [n.ip for n in inv.nodes]) if options.inventory is None \
        else DEFAULTS[backend]  # a described cluster has run nothing
    return Planned(made, inv, spec, sum(per_size[len(g.ranks)] for g in made.groups),
                   estimate(made, spec, inv, rates, backend))


def _inventory(options: PlanOptions) -> Inventory:
    """The described inventory, or the live cluster's (its NVLink domains read only where a
    domain pattern needs them: nvidia-smi -q on every node)."""
    if options.inventory is not None:
        return from_description(options.inventory)
    from orchestrator.execution.connect import joined_inventory

    with joined_inventory(options.sweep, domains=bool(set(options.sweep.patterns) & set(DOMAIN_PATTERNS))) as inv:
        return inv
