"""Runner: for each round, form its groups, run every case on them, hand the rows to the store.

All calls of one group are queued on its actors at once (an actor runs its calls in order), and
one event loop waits on every group of the round with the nearest deadline as its timeout. Each
stage has its own deadline: forming and leaving the group --group-timeout, each case
`planner.case_deadline_s` (longer for more bytes). A group that raises or outlives a deadline is
abandoned: its actors are killed and replaced, its remaining measurements are recorded as
`failed` or `timeout`, and the other groups go on. Rows are built by `execution.rows`; whoever
watches the run (console, tally) is told through typed events (execution.events).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import ray

from orchestrator.errors import one_line
from orchestrator.execution import events as ev
from orchestrator.execution import ras, rows, signals, transport
from orchestrator.execution.events import GroupFailure, Observers, RunObserver
from orchestrator.execution.pool import ActorPool, PlacementError
from orchestrator.results.store import CUT_SHORT, ResultStore
from orchestrator.sweep.planner import Group, Plan, build_cases, case_deadline_s, one_size_each
from orchestrator.sweep.spec import SweepSpec
from workloads.messages import Case, Joined, JoinRequest, Stage, Status


@dataclass(eq=False)  # identity: runs are dictionary keys
class _GroupRun:
    group: Group
    base: dict
    cases: list[Case]
    t0: float
    limit_s: float  # the current stage's deadline, from its start
    deadline: float = 0.0
    stage: Stage = Stage.JOIN
    refs: dict[Stage, list] = field(default_factory=dict)  # join, leave: one per rank
    case_refs: list[list] = field(default_factory=list)  # per case, one per rank
    next_case: int = 0
    rows: list[dict] = field(default_factory=list)
    transports: list = field(default_factory=list)  # per rank, from join and then from leave
    done: bool = False
    saved_at: float = 0.0  # when its cases so far were last written (Runner._checkpoint)

    def __post_init__(self) -> None:
        self.deadline = self.t0 + self.limit_s
        self.saved_at = self.t0

    def stage_refs(self) -> list:
        return self.case_refs[self.next_case] if self.stage is Stage.MEASURE else self.refs[self.stage]

    def enter(self, stage: Stage, limit_s: float) -> None:
        self.stage, self.limit_s, self.deadline = stage, limit_s, time.monotonic() + limit_s


class Runner:
    """Runs a plan round by round on the pool's workers; writes each group's rows as it goes and ends."""

    def __init__(self, spec: SweepSpec, pool: ActorPool, store: ResultStore, backend: str, run: rows.RunRef,
                 observers: Sequence[RunObserver], platforms: dict[str, tuple[str, ...]],
                 cases_for: Callable[[Group], list[Case]] | None = None) -> None:
        self.spec, self.pool, self.store = spec, pool, store
        self.backend, self.run_ref, self.platforms = backend, run, platforms
        self.observers = Observers(list(observers))
        self._cases: dict[int, list[Case]] = {}
        self._cases_for = cases_for  # a plan's own cases (a replay's), else the sweep's by group size
        self._ras_recent: dict = {}  # NCCL RAS's last answer, for the next group that times out (ras.hang_note)
        self._in_flight = 1  # groups of the round in flight: the checkpoints' budget is shared among them

    def run(self, plan: Plan, skip: frozenset[str] | set[str] = frozenset()) -> None:
        for rnd in plan.rounds:
            todo = [g for g in rnd if g.group_id not in skip]
            if todo and signals.stop_requested():  # SIGUSR1: none more starts once the round in flight ended
                raise signals.StopRequested()
            if todo:
                self.observers.round_started(ev.RoundStarted(todo[0].round, len(todo)))
                self._run_round(todo, len(rnd))
                self.observers.round_ended(ev.RoundEnded(todo[0].round))

    # -- one round ------------------------------------------------------------------------
    def _run_round(self, groups: list[Group], groups_in_round: int) -> None:
        now = time.monotonic()
        self.pool.refresh_nodes()
        runs = []
        for g in groups:
            n = len(g.ranks)
            pair = [self.pool.inv.nodes[i].node_id for i in g.pair] if g.pair else None
            base = rows.group_base(self.run_ref, self.backend, g, groups_in_round,
                                   [self.pool.workers[r].info for r in g.ranks],
                                   [self.pool.slots[r][1] for r in g.ranks], pair, self.platforms,
                                   {n.node_id: n.nvlink_domain for n in self.pool.inv.nodes if n.nvlink_domain})
            cases = self._cases_for(g) if self._cases_for else self._cases.setdefault(
                n, one_size_each(build_cases(self.spec, n)))
            r = _GroupRun(g, base, cases, now, self.spec.group_timeout_s)
            self.observers.group_started(ev.GroupStarted(g, base))
            reason = self.pool.unavailable(g.ranks)
            if reason:
                self._end(r, Status.SKIPPED, list(range(n)), reason)
            else:
                runs.append(r)
        if not runs:
            return
        self._in_flight = len(runs)
        self.observers.measuring(ev.Measuring(groups[0].round))
        owner = {}
        try:
            for r in runs:
                self._submit(r)
                for ref in [x for refs in (*r.refs.values(), *r.case_refs) for x in refs]:
                    owner[ref] = r
            self._event_loop(runs, owner)
        except KeyboardInterrupt:  # Ctrl-C or a scheduler's SIGTERM: what the groups in flight finished is kept
            for r in runs:
                if not r.done and r.rows:
                    self._cut_short(r)
            raise

    def _cut_short(self, r: _GroupRun) -> None:
        """End a group an interrupt stopped with the sizes it finished, a CUT_SHORT row for each other
        (--resume measures the group again whole); whole where only leaving was left."""
        if r.next_case >= len(r.cases):
            self._end(r, Status.OK)
        else:
            self._end(r, Status.SKIPPED, (), CUT_SHORT)

    def _checkpoint(self, r: _GroupRun) -> None:
        """Write what a group in flight measured, the rest as CUT_SHORT rows (as an interrupt does): at most
        CHECKPOINT_WRITES files a second over the round, each group every CHECKPOINT_S or more."""
        now = time.monotonic()
        if r.next_case >= len(r.cases) or now - r.saved_at < CHECKPOINT_S * max(1, self._in_flight / CHECKPOINT_WRITES):
            return
        r.saved_at = now
        self.store.write_group(r.group.group_id, r.rows + rows.unmeasured_rows(
            r.base, r.cases[r.next_case:], Status.SKIPPED, CUT_SHORT, None))

    def _submit(self, r: _GroupRun) -> None:
        n = len(r.group.ranks)
        # The backend's own timeout is longer than any deadline of the group, so the driver's
        # deadline fires first and names the ranks that hang, instead of a backend error on those
        # that wait.
        longest = max([self.spec.group_timeout_s, *(case_deadline_s(self.spec, c) for c in r.cases)])
        reqs = [JoinRequest(r.group.group_id, j, n, self.backend, longest + 30) for j in range(n)]
        r.refs[Stage.JOIN] = [self._actor(r, j).join.remote(req) for j, req in enumerate(reqs)]
        r.case_refs = [[self._actor(r, j).run.remote(case) for j in range(n)] for case in r.cases]
        r.refs[Stage.LEAVE] = [self._actor(r, j).leave.remote() for j in range(n)]
        r.enter(Stage.JOIN, self.spec.group_timeout_s)

    def _event_loop(self, active: list[_GroupRun], owner: dict) -> None:
        while active:
            pending = [ref for r in active for ref in self._outstanding(r)]
            timeout = max(0.0, min(r.deadline for r in active) - time.monotonic())
            ready, _ = ray.wait(pending, num_returns=1, timeout=timeout)
            if ready:
                ready, _ = ray.wait(pending, num_returns=len(pending), timeout=0)
            for r in {owner[ref] for ref in ready}:
                self._advance(r)
            now = time.monotonic()
            for r in active:
                if not r.done and now >= r.deadline:
                    self._advance(r)  # results that arrived since the wait count
                if not r.done and now >= r.deadline:
                    self._timed_out(r)
            active = [r for r in active if not r.done]

    def _timed_out(self, r: _GroupRun) -> None:
        """Name the culprits of a hang: of the ranks that had not returned, those whose process
        does not answer a ping (stopped, dead); if every one answers, all of them (stuck in the
        backend, or waiting on a network that lost them)."""
        late = [j for j, ref in enumerate(r.stage_refs()) if not _is_ready(ref)]
        silent_global = set(self.pool.silent([r.group.ranks[j] for j in late]))
        silent = [j for j in late if r.group.ranks[j] in silent_global]
        what = f"deadline of {r.limit_s:.1f}s passed during {r.stage.value}; "
        if silent:
            waiting = [j for j in late if j not in silent]
            what += (f"ranks {_ranks(silent)} on {', '.join(sorted({rows.where(r.base, j) for j in silent}))} do not "
                     f"answer (stopped or dead)" + (f", ranks {_ranks(waiting)} wait for them" if waiting else ""))
        else:
            what += (f"ranks {_ranks(late)} on {', '.join(sorted({rows.where(r.base, j) for j in late}))} had not "
                     "returned; every one answers (stuck in the backend or waiting on the network)")
        ras_addr = next((w.info.comm_env.get("NCCL_RAS_ADDR") for j in late
                         if (w := self.pool.workers[r.group.ranks[j]]) is not None), None)
        if self.backend == "nccl" and ras_addr:  # only where the workers set NCCL_RAS_ADDR (off localhost)
            # nodes whose processes answer first (a powered-off host would spend the whole budget), silent last
            answering = [r.base["node_ips"][j] for j in range(len(r.group.ranks)) if j not in silent]
            nodes = answering + [r.base["node_ips"][j] for j in silent]
            what += "; " + ras.hang_note(nodes, set(r.base["pids"]), ras_addr, _RAS_TIMEOUT_S, self._ras_recent)
        self._end(r, Status.TIMEOUT, silent or late, what, culprits=bool(silent))

    def _outstanding(self, r: _GroupRun) -> list:
        return [ref for ref in r.stage_refs() if not _is_ready(ref)] or r.stage_refs()

    def _advance(self, r: _GroupRun) -> None:
        """Move the group through every stage whose results are all in."""
        while not r.done:
            refs = r.stage_refs()
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            if any(_error(ref) for ref in ready):
                self._fail(r, refs)
                return
            if len(ready) < len(refs):
                return
            results = ray.get(refs)
            if r.stage is Stage.JOIN:
                self._joined(r, results)
            elif r.stage is Stage.MEASURE:
                case = r.cases[r.next_case]
                measured = (rows.replay_rows if case.replay else rows.measured_rows)(r.base, case, results)
                r.rows += measured
                self.observers.rows_measured(ev.RowsMeasured(r.group, tuple(measured)))
                r.next_case += 1
                self._checkpoint(r)
                self._next_case(r)
            else:
                r.transports = [x.transport for x in results]
                r.base["comm_destroy_s"] = max(x.destroy_s for x in results)  # the group is gone when all are
                self._end(r, Status.OK)

    def _fail(self, r: _GroupRun, refs: list) -> None:
        """A rank raised. Its peers fail too once it is gone (connection reset), often first: wait
        a moment for the others, and blame the ranks whose process died if there are any."""
        ray.wait(refs, num_returns=len(refs), timeout=_PEER_GRACE_S)
        errors = {j: e for j, ref in enumerate(refs) if (e := _error(ref)) is not None}
        died = [j for j, e in errors.items() if isinstance(e, ray.exceptions.RayActorError)]
        blamed = died or sorted(errors)
        j = blamed[0]
        self._end(r, Status.FAILED, blamed, f"rank {j} on {rows.where(r.base, j)}: {one_line(errors[j])}",
                  culprits=bool(died))

    def _joined(self, r: _GroupRun, joined: list[Joined]) -> None:
        r.base.update(rows.joined_fields(joined))
        r.transports = [x.transport for x in joined]
        self.observers.group_joined(ev.GroupJoined(r.group, time.monotonic() - r.t0, tuple(joined)))
        wrong = transport.unexpected_network(self.spec.expect_net, self.backend, r.base, r.transports)
        if wrong:
            self._end(r, Status.FAILED, *wrong)
        else:
            self._next_case(r)

    def _next_case(self, r: _GroupRun) -> None:
        if r.next_case < len(r.cases):
            r.enter(Stage.MEASURE, case_deadline_s(self.spec, r.cases[r.next_case]))
        else:
            r.enter(Stage.LEAVE, self.spec.group_timeout_s)

    # -- the end of a group ---------------------------------------------------------------
    def _end(self, r: _GroupRun, status: Status, failed: Sequence[int] = (), error: str | None = None,
             culprits: bool = False) -> None:
        """Record what was not measured, write the group's rows, replace failed workers.
        `culprits`: the failed ranks are the cause (did not answer, died), not merely affected."""
        failure = None
        r.base.update(transport.columns(self.backend, r.base["node_ids"], r.transports))
        for row in r.rows:
            row.update((k, r.base[k]) for k in (*transport.COLUMNS, *rows.LIFECYCLE) if k in r.base)
            row.update(transport.inspector_fields(row, r.transports))
        if status is not Status.OK:
            r.rows += rows.unmeasured_rows(r.base, r.cases[r.next_case:], status, error,
                                           None if status is Status.SKIPPED else failed)
            failure = GroupFailure(status, error or status.value, r.group.group_id,
                                   tuple(r.group.ranks[j] for j in failed),
                                   tuple(sorted({rows.where(r.base, j) for j in failed})), culprits)
        self.store.write_group(r.group.group_id, r.rows)
        r.done = True
        self.observers.group_ended(ev.GroupEnded(r.group, status, tuple(r.rows), failure))
        if status in (Status.FAILED, Status.TIMEOUT):
            try:
                self.pool.respawn(list(r.group.ranks))
            except PlacementError as e:
                self.observers.note(ev.Note(f"  could not replace the workers of group {r.group.group_id}: {e}"))

    def _actor(self, r: _GroupRun, j: int):
        return self.pool.actor(r.group.ranks[j])


_PEER_GRACE_S = 5.0
CHECKPOINT_S, CHECKPOINT_WRITES = 1.0, 16  # Runner._checkpoint: each group's least interval, files a second
_RAS_TIMEOUT_S = 5.0  # the most a hang's verdict waits on NCCL's RAS (NCCL_RAS_ADDR set on the workers)


def _error(ref) -> BaseException | None:
    """The exception of a finished call, or None (not finished, or it returned)."""
    ready, _ = ray.wait([ref], timeout=0)
    if not ready:
        return None
    try:
        ray.get(ref, timeout=0)
    except Exception as e:
        return e
    return None


def _is_ready(ref) -> bool:
    ready, _ = ray.wait([ref], timeout=0)
    return bool(ready)


def _ranks(ranks: Sequence[int]) -> str:
    return ",".join(map(str, ranks))
