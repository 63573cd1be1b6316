"""`collbench run` and `api.run`: measure a sweep, or finish a run that was cut short (resume).
The body that measures is execution.jobs.sweep (the Ray port); what is decided before it, the
resumed run's own sweep and what today's options may change of it, is decided here, once."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from orchestrator.errors import UsageError
from orchestrator.execution.jobs import RunResult
from orchestrator.execution.voice import COMMAND_LINE, Voice
from orchestrator.operations.sweeps import Sweeps
from orchestrator.results.location import check_writable, resolve_output
from orchestrator.results.schema import RunState
from orchestrator.sweep import resume
from orchestrator.sweep.spec import SweepSpec, spec_fields

__all__ = ["SWEEPS", "RunOptions", "RunResult", "check_run_id", "run"]
SWEEPS = Sweeps("collbench run", fields=tuple(f.name for f in spec_fields()))  # a run takes every sweep option
check_run_id = resume.check_run_id  # a face refuses a bad id before it reads anything else


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """A run's sweep and how it starts, checked when made."""

    sweep: SweepSpec
    resume: str | None = None
    """Finish this run of the sweep's output: measure only the groups it lacks, with its own sweep."""
    retry_failed: bool = False
    """With `resume`: also measure again the groups that failed, timed out or were skipped."""
    given: frozenset[str] = frozenset()
    """The sweep fields the caller set (a resumed run keeps its own for the others, and refuses a
    given one that would change what it measures)."""
    doctor: bool = True
    """The quick checks before the first group (a failed one refuses the run naming the node)."""
    run_id: str | None = None
    """Name the run: a new run of this id, or where the output holds one that did not finish, that run
    resumed (a requeued batch job naming its run by its job id resumes itself); one that finished is
    not measured again."""

    def __post_init__(self) -> None:
        for given, flag in ((self.resume, "--resume"), (self.run_id, "--run-id")):
            if given is not None:
                resume.check_run_id(given, flag)  # before anything reads or writes a path made from it
        if self.resume is not None and self.run_id is not None:
            raise UsageError(f"--run-id {self.run_id} with --resume {self.resume}: give one (--run-id resumes "
                             "its run where it exists)")
        if self.retry_failed and self.resume is None:
            raise UsageError("--retry-failed: only with --resume RUN_ID")


def run(options: RunOptions, *, voice: Voice = COMMAND_LINE, progress: bool = False,
        placement_group=None) -> RunResult:
    """Measure the sweep (or the rest of the resumed run); its RunResult. `progress`: the console's
    table of rows and progress on stdout."""
    spec = dataclasses.replace(options.sweep, output=resolve_output(options.sweep.output))
    saved, resuming = None, options.resume
    if options.run_id is not None:
        from orchestrator.results import dataset

        record = dataset.manifest(spec.output, options.run_id)
        if record is not None and record.get("state") == RunState.FINISHED.value:
            return RunResult(options.run_id, spec.output, RunState.FINISHED, 0, manifest=record,
                             message=f"collbench: run {options.run_id} in {spec.output} finished already: nothing "
                             "measured again (a new run needs another --run-id)")
        if record is not None and record.get("command") not in (None, "run"):
            raise UsageError(f"--run-id {options.run_id}: {spec.output} holds a {record['command']} run of that "
                             "id, not a sweep; name another")
        resuming = options.run_id if record is not None else None
    if resuming is not None:
        saved = _resumed_run(spec.output, resuming)
        spec = resume.resumed_spec(saved, spec, set(options.given), resuming)
    check_writable(spec.output)
    from orchestrator.execution import jobs  # Ray and all it needs, after the cheap checks

    return jobs.sweep(spec, run_id=resuming or options.run_id, saved=saved, retry_failed=options.retry_failed,
                      voice=voice, progress=progress, placement_group=placement_group, doctor=options.doctor)


def _resumed_run(output: str, run_id: str) -> resume.SavedRun:
    """The run's own sweep and nodes, from its manifest."""
    from orchestrator.results import dataset

    record = dataset.manifest(output, run_id)
    if record is None:
        raise UsageError(f"--resume {run_id}: no such run in {output}")
    if record.get("command") == "replay":
        raise UsageError(f"--resume {run_id}: a replay (one group of every traced rank) is not resumed; "
                         "run `collbench replay` again")
    return resume.saved_run(record, run_id)
