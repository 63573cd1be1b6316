"""A sweep from start to end, the one body that `collbench run`, the Python API (orchestrator.api)
and `collbench watch` call: join the cluster, check it, start the workers, measure the plan, and
close the run so that nothing is lost whatever ends it (finished; Ctrl-C or SIGTERM: interrupted,
with the command that resumes it; a full disk: interrupted, in one line; a lost lock: stopped
without writing more; any other error: the manifest marked failed before the error goes on).

The caller decides what is printed: the console (progress, rows) is one of the observers it
passes, and its `Voice` receives the run's own lines (what it does; what went wrong)."""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from orchestrator.errors import UsageError
from orchestrator.execution.events import RunObserver
from orchestrator.execution.outcome import Tally
from orchestrator.execution.voice import COMMAND_LINE, Voice
from orchestrator.results.history import earlier_rates
from orchestrator.results.location import new_run_id
from orchestrator.results.schema import RunState
from orchestrator.sweep import resume
from orchestrator.sweep.estimate import BUSY_SAID, Rates, busy_factor, estimate
from orchestrator.sweep.planner import Group, Plan
from orchestrator.sweep.spec import SweepSpec
from workloads.messages import Case


@dataclass
class RunResult:
    """What a sweep did: its run id and where its rows are, how it ended, and its tally."""

    run_id: str
    output: str  # the results dataset (--output), a folder or a URI
    state: RunState
    exit_code: int  # the command's: 0 ok, 1 failures or wrong results, 130 Ctrl-C, 143 SIGTERM
    outcome: Tally = field(default_factory=Tally)
    manifest: dict = field(default_factory=dict)
    startup: str = ""  # where the start went, one line
    message: str | None = None  # the line that said why it ended early
    rows_at: str = ""  # the run's own folder (or URI) of rows

    @property
    def finished(self) -> bool:
        """It measured what it was to measure (failed groups included); else it ended early (`message`)."""
        return self.state == RunState.FINISHED

    def rows(self):
        """The run's rows as a pandas DataFrame (read back from the dataset)."""
        from orchestrator.results import dataset

        return dataset.load(self.output, self.run_id)

    def closing_lines(self, t_start: float) -> list[str]:
        """The run's last lines on stdout: where the time went (since `t_start`, a time.monotonic()
        reading), and what was written where."""
        outcome = self.outcome
        wall = time.monotonic() - t_start
        first = f"{outcome.first_row_at - t_start:.1f}s" if outcome.first_row_at else "-"
        return [
            f"collbench: wall {wall:.1f}s, measuring {outcome.measured_s:.1f}s ({outcome.measured_s / wall:.0%}), "
            f"first row after {first}, {self.startup}, group set-up median {_median(outcome.setup_s):.2f}s, "
            f"tear-down median {_median(outcome.teardown_s):.2f}s",
            f"collbench: {outcome.rows} row(s) in {outcome.groups_ok} ok, {outcome.groups_failed} failed and "
            f"{outcome.groups_skipped} skipped group(s) written to {self.rows_at}",
        ]


class Planner(Protocol):
    """A plan other than the sweep's (orchestrator.execution.replaying): its groups, and each
    group's cases."""

    def plan(self, spec: SweepSpec, inv) -> Plan: ...

    def cases(self, group: Group) -> list[Case]: ...

    def expected_s(self) -> float | None: ...


def sweep(spec: SweepSpec, *, run_id: str | None = None, saved: resume.SavedRun | None = None,
          retry_failed: bool = False, observers: Sequence[RunObserver] = (), voice: Voice = COMMAND_LINE,
          progress: bool = False, live_line: bool = False, placement_group=None,
          partition: str | None = None, cpus_per_rank: float = 0.0, command: str = "run",
          doctor: bool = True, planner: Planner | None = None) -> RunResult:
    """Measure `spec`'s plan on the cluster; a resumed run (`saved`, its manifest's run) measures
    the groups it lacks. `progress`: the console (a table of rows, progress and an estimate, on
    stdout) watches the run, told how many groups it measures once that is known; `live_line`: on
    a terminal, the live line alone (watch's cycles: a log gets their one line each). `planner`: a
    plan of its own and its groups' cases (a replay), instead of the sweep's.
    Raises UsageError for what makes the sweep impossible (before anything is measured)."""
    from orchestrator.execution.lifecycle import live
    from orchestrator.execution.session import Session
    from orchestrator.sweep.planner import check_plan, make_plan

    now = dt.datetime.now(dt.timezone.utc)
    resuming = saved is not None
    run_id = run_id or new_run_id(now)
    resume_with = resume.resume_command(run_id, spec.output, spec.address) if planner is None else \
        "collbench replay again (a replay is one group: it is not resumed)"
    result = RunResult(run_id, spec.output, RunState.FAILED, 1)

    def body(session: Session) -> None:
        inv, backend = session.cluster()
        change = resume.cluster_change(saved.nodes, inv) if saved else None
        if change:
            raise UsageError(f"--resume {run_id}: the cluster is not the one the run started on ({change}), "
                             "so its groups would not be the same; start a new run")
        inv = session.read_nodes()  # GPU nodes: their NVLink domains, before the plan that may use them
        if planner is None:
            plan = make_plan(session.spec, inv)  # as the backend runs it (`-d all` expanded)
            check_plan(session.spec, plan)
        else:
            plan = planner.plan(session.spec, inv)
        session.check_devices({len(g.ranks) for g in plan.groups})
        store = session.store
        skip = store.finished_groups(retry_failed) if resuming else set()
        voice.say(f"collbench: run {run_id} on {session.where}: {len(inv.nodes)} node(s), "
                  f"{inv.world_size} rank(s), backend {backend}, {len(plan)} group(s) in {len(plan.rounds)} "
                  f"round(s); results -> {store.location}")
        guess = None
        if planner is None:  # a replay's steps are priced by predict --trace, not here
            rates = rates_here(session.spec, inv, backend)
            guess = estimate(plan, session.spec, inv, rates, backend, frozenset(skip))
            voice.say(f"collbench: {guess.line()}")
        if resuming:
            again = " (failed, timed-out and skipped ones are measured again)" if retry_failed else ""
            voice.say(f"collbench: resuming: {len(skip)} group(s) already on disk are skipped{again}")
        console = None
        if progress or live_line:
            import sys

            from orchestrator.execution.console import Console, is_terminal
            from orchestrator.execution.live import Work

            left = [g.group_id for g in plan.groups if g.group_id not in skip]
            if guess:
                work = Work.of(guess, left)
            else:  # a replay: the job's own times where the trace has them, after the start-up a run takes
                traced = planner.expected_s()
                start_s = rates_here(session.spec, inv, backend).start_s
                work = Work.unpriced(left, traced + start_s if traced is not None else None)
            if progress:
                console = Console(len(plan) - len(skip), work=work)
            elif is_terminal(sys.stderr):  # the live line alone; a failed group's line beside it, not in stdout
                console = Console(len(plan) - len(skip), out=sys.stderr, rows=False, work=work, terminal=True,
                                  ends=False)
        try:
            runner, outcome = session.start(len(plan), [*([console] if console else []), *observers],
                                            command=command, skipped=len(skip),
                                            cases_for=planner.cases if planner else None)
            say_warnings(session.diagnosis, voice)
            result.outcome = outcome
            runner.run(plan, skip)
        finally:
            if console is not None:
                console.close()
        session.finish(outcome)

    session, finished = live(
        lambda: Session(spec, run_id, now, placement_group=placement_group, partition=partition,
                        cpus_per_rank=cpus_per_rank, doctor=doctor, voice=voice),
        body, result, voice=voice, unit="group", resume_hint=resume_with,
        interrupted_line=lambda s: f"collbench: interrupted; {saved_line(s.store)}. Resume with:\n  {resume_with}")
    if finished:
        result.state, result.exit_code = RunState.FINISHED, closing_code(spec, result.outcome, voice)
    return _closed(result, session)


def saved_line(store) -> str:
    """What an interrupted run holds on disk, read back: whole groups, groups cut short, ok rows."""
    whole, cut, ok_rows = store.saved()
    if not whole and not cut:
        return f"nothing was saved in {store.location} (no group had finished a case)"
    shown = f"{whole} group(s)" + (f" and the finished sizes of {cut} group(s) in flight" if cut else "")
    return f"{shown} saved in {store.location}, {ok_rows} measurement(s)"


def say_warnings(diagnosis, voice: Voice) -> None:
    """What the quick doctor found that does not refuse a run (a run goes on with it): one line per
    node and check (its warnings, and failures of checks that are not quick ones: a GID missing,
    NCCL_CHUNK_SIZE on one node), and the cluster's own findings no node's check says (an NCCL
    setting on every node)."""
    from orchestrator.doctor.checks import CheckStatus
    from orchestrator.execution.doctor import QUICK

    if diagnosis is None:
        return
    said = (CheckStatus.WARN, CheckStatus.FAIL)
    on_nodes = {c.name for n in diagnosis.nodes for c in n["checks"]}
    for node, host, check in [(n["node"], n["host"], c) for n in diagnosis.nodes for c in n["checks"]
                              if c.status in said and not (c.status is CheckStatus.FAIL and c.name in QUICK)]:
        voice.warn(f"collbench: doctor: node {node} ({host}): {check.name}: {check.detail}; {check.hint}")
    for check in diagnosis.cluster:
        if check.status in said and check.name not in on_nodes and check.name not in QUICK:
            voice.warn(f"collbench: doctor: {check.name}: {check.detail}; {check.hint}")


def _closed(result: RunResult, session) -> RunResult:
    if session is not None:
        result.manifest = dict(session.manifest)
        result.startup = session.startup.line()
        result.output = session.spec.output
        result.rows_at = session.store.run_dir
    return result


def closing_code(spec: SweepSpec, outcome: Tally, voice: Voice) -> int:
    """1 when a group failed (unless --allow-failures) or a check found wrong elements; said."""
    from orchestrator.execution import console

    code = 0
    if outcome.failures:
        voice.warn("collbench: failures:")
        for line in console.failure_summary(outcome.failures):
            voice.warn("  " + line)
        if not spec.allow_failures:
            code = 1
    if outcome.n_wrong:
        voice.warn(f"collbench: {outcome.n_wrong} wrong element(s) in the checks")
        code = 1
    return code


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2] if values else 0.0


def rates_here(spec: SweepSpec, inv, backend: str) -> Rates:
    """The rates an estimate prices a plan at on these nodes: an earlier run's on them (or the
    backend's defaults), at this host's load now."""
    return _at_this_hosts_load(earlier_rates(spec.output, backend, [n.ip for n in inv.nodes]), inv, backend)


def _at_this_hosts_load(rates: Rates, inv, backend: str) -> Rates:
    """CPU ranks (gloo) on the driver's own node run at the share of its CPUs other work leaves
    them: the rates as the host's load now makes them, against the load they were learned at
    (estimate.busy_factor), where that moves them by BUSY_SAID or more either way."""
    import ray

    from workloads.contention import busy_cpus

    if backend != "gloo":
        return rates
    here = ray.get_runtime_context().get_node_id()
    node = next((n for n in inv.nodes if n.node_id == here), None)
    if node is None:
        return rates
    cpus, other = os.cpu_count() or 1, busy_cpus()
    factor = busy_factor(rates.load_per_cpu, other, node.ranks, cpus)
    if 1 / BUSY_SAID < factor < BUSY_SAID:
        return rates
    return rates.at_load(factor, f"x{factor:.2g} for this host's load now: {other:.1f} of its {cpus} CPUs busy "
                                 f"beside {node.ranks} rank(s)")
