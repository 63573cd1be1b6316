"""`collbench doctor` and `api.doctor`: every node of the cluster checked at once for what makes
collectives fail, hang or lie (the checks and their agents: execution.doctor)."""

from __future__ import annotations

from orchestrator.doctor.checks import CheckStatus
from orchestrator.operations.sweeps import Sweeps

__all__ = ["SWEEPS", "CheckStatus", "doctor"]  # CheckStatus: what a Diagnosis's checks say, for the faces
from orchestrator.sweep.spec import SweepSpec

# What doctor reads of a sweep: which cluster, and which of its nodes with how many CPU ranks.
SWEEPS = Sweeps("collbench doctor", fields=("address", "verbose", "ranks_per_node", "nodes", "exclude", "env"))


def doctor(sweep: SweepSpec):
    """The Diagnosis of the nodes `sweep` selects: the cluster's checks and each node's."""
    from orchestrator.execution.connect import joined_inventory
    from orchestrator.execution.doctor import diagnose

    with joined_inventory(sweep) as inv:
        return diagnose(inv, env=sweep.env_vars())
