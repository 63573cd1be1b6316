"""`collbench replay` and `api.replay`: a training job's collectives, from its Flight Recorder
dumps, run again on the cluster (the trace read by sweep.trace, its planner execution.replaying);
rows with pattern "replay"."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from orchestrator.execution.jobs import RunResult
from orchestrator.execution.replaying import MAX_REPEAT
from orchestrator.execution.voice import COMMAND_LINE, Voice
from orchestrator.operations.sweeps import Sweeps
from orchestrator.results.location import check_writable, resolve_output
from orchestrator.sweep.spec import SweepSpec

__all__ = ["MAX_REPEAT", "SWEEPS", "ReplayOptions", "replay"]

# What a replay takes of a sweep: where and how it runs; what it measures is the trace's.
SWEEPS = Sweeps("collbench replay", fields=("backend", "ranks_per_node", "nodes", "exclude", "group_timeout_s",
                                            "deadline_rate_gbps", "output", "address", "verbose", "env", "allow_failures",
                                            "wait_nodes"))


@dataclass(frozen=True, kw_only=True)
class ReplayOptions:
    """The dumps and how to replay them (checked when the dumps are read, before anything runs)."""

    dumps: tuple[str, ...]
    """Dump files, or folders of them (file names end in the rank)."""
    sweep: SweepSpec = field(default_factory=SweepSpec)
    repeat: int = 3
    """Replay the traced steps this many times."""
    gaps: bool = False
    """Issue each op at its traced time from its step's start, instead of back to back."""
    ops_per_step: int | None = None
    """Ops of rank 0 per step; None: found from the trace."""
    trace_ranks_per_node: int | None = None
    """The traced job's ranks per node; None: the ranks this cluster's nodes hold."""
    doctor: bool = True


def replay(options: ReplayOptions, *, voice: Voice = COMMAND_LINE, progress: bool = False) -> RunResult:
    """Replay the dumps; the RunResult. What was found in the trace is said first; `progress`: the
    console's table of rows and progress on stdout."""
    from orchestrator.execution.replaying import from_dumps

    planner, said = from_dumps(options.dumps, repeat=options.repeat, gaps=options.gaps,
                               ops_per_step=options.ops_per_step, trace_ranks_per_node=options.trace_ranks_per_node)
    spec = dataclasses.replace(options.sweep, output=resolve_output(options.sweep.output))
    check_writable(spec.output)
    for line in said:
        voice.say(f"collbench: {line}")
    from orchestrator.execution import jobs

    return jobs.sweep(spec, voice=voice, progress=progress, doctor=options.doctor, command="replay",
                      planner=planner)
