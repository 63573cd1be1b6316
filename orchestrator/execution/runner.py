"""Runner: for each round, form its groups, run every case on them, hand the rows to the store.

All calls of one group are queued on its actors at once (an actor runs its calls in order), and
one event loop waits on every group of the round with the nearest deadline as its timeout. A
group that raises or outlives its deadline is abandoned: its actors are killed and replaced, its
remaining measurements are recorded as `failed` or `timeout`, and the other groups go on. Rows
are built by `execution.rows`; whoever watches the run (console, tally) is told through the
`RunObserver` methods (execution.events).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import ray

from orchestrator.errors import one_line
from orchestrator.execution import rows
from orchestrator.execution.events import RunObserver
from orchestrator.execution.pool import ActorPool, PlacementError
from orchestrator.results.store import ResultStore
from orchestrator.sweep.planner import Group, Plan, build_cases
from orchestrator.sweep.spec import SweepSpec
from workloads.messages import Case, Joined, JoinRequest, Stage, Status


@dataclass(eq=False)  # identity: runs are dictionary keys
class _GroupRun:
    group: Group
    base: dict
    cases: list[Case]
    deadline: float
    t0: float
    stage: Stage = Stage.RENDEZVOUS
    refs: dict[Stage, list] = field(default_factory=dict)  # join, leave: one per rank
    case_refs: list[list] = field(default_factory=list)  # per case, one per rank
    next_case: int = 0
    rows: list[dict] = field(default_factory=list)
    done: bool = False

    def stage_refs(self) -> list:
        return self.case_refs[self.next_case] if self.stage is Stage.MEASURE else self.refs[self.stage]


class Runner:
    """Runs a plan round by round on the pool's workers and writes every group's rows as soon as
    the group ends (ok, failed, timed out or skipped)."""

    def __init__(self, spec: SweepSpec, plan: Plan, pool: ActorPool, store: ResultStore, backend: str,
                 run: rows.RunRef, observers: Sequence[RunObserver]) -> None:
        self.spec, self.plan, self.pool, self.store = spec, plan, pool, store
        self.backend, self.run_ref, self.observers = backend, run, list(observers)
        self._cases: dict[int, list[Case]] = {}

    def run(self, skip: frozenset[str] | set[str] = frozenset()) -> None:
        for rnd in self.plan.rounds:
            todo = [g for g in rnd if g.group_id not in skip]
            if todo:
                self._run_round(todo, len(rnd))

    def _notify(self, event: str, *args) -> None:
        for o in self.observers:
            getattr(o, event)(*args)

    # -- one round ------------------------------------------------------------------------
    def _run_round(self, groups: list[Group], groups_in_round: int) -> None:
        now = time.monotonic()
        dead = self.pool.refresh_nodes()
        runs = []
        for g in groups:
            n = len(g.ranks)
            pair = [self.pool.inv.nodes[i].node_id for i in g.pair] if g.pair else None
            base = rows.group_base(self.run_ref, self.backend, g, groups_in_round,
                                   [self.pool.workers[r].info for r in g.ranks], pair)
            r = _GroupRun(g, base, self._cases.setdefault(n, build_cases(self.spec, n)),
                          now + self.spec.group_timeout_s, now)
            self._notify("group_started", g, base)
            reason = self._unavailable(g, dead)
            if reason:
                self._end(r, Status.SKIPPED, list(range(n)), reason)
            else:
                runs.append(r)
        if not runs:
            return
        self._notify("measuring")
        owner = {}
        for r, address in self._open_stores(runs).items():
            self._submit(r, *address)
            for ref in [x for refs in (*r.refs.values(), *r.case_refs) for x in refs]:
                owner[ref] = r
        self._event_loop([r for r in runs if not r.done], owner)

    def _open_stores(self, runs: list[_GroupRun]) -> dict[_GroupRun, tuple[str, int]]:
        """Rank 0 of each group opens its rendezvous store. One wait for every group, so a slow
        rank 0 costs no other group its deadline."""
        stores = {self._actor(r, 0).open_store.remote(self.spec.group_timeout_s): r for r in runs}
        ready, _ = ray.wait(list(stores), num_returns=len(stores), timeout=self.spec.group_timeout_s)
        opened = {}
        for ref, r in stores.items():
            if ref not in ready:
                self._end(r, Status.TIMEOUT, [0], "rendezvous store on rank 0 did not open before the deadline")
                continue
            try:
                opened[r] = ray.get(ref, timeout=0)
            except Exception as e:
                self._end(r, Status.FAILED, [0], f"rendezvous store on rank 0: {one_line(e)}")
        return opened

    def _submit(self, r: _GroupRun, ip: str, port: int) -> None:
        n = len(r.group.ranks)
        # The backend's own timeout is longer than the group's deadline, so the driver's deadline
        # fires first and names the ranks that hang, instead of a backend error on those that wait.
        reqs = [JoinRequest(r.group.group_id, j, n, ip, port, self.backend, self.spec.group_timeout_s + 30)
                for j in range(n)]
        r.refs[Stage.JOIN] = [self._actor(r, j).join.remote(req) for j, req in enumerate(reqs)]
        r.case_refs = [[self._actor(r, j).run.remote(case) for j in range(n)] for case in r.cases]
        r.refs[Stage.LEAVE] = [self._actor(r, j).leave.remote() for j in range(n)]
        r.stage = Stage.JOIN

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
                    late = [j for j, ref in enumerate(r.stage_refs()) if not _is_ready(ref)]
                    hosts = ", ".join(sorted({_where(r.base, j) for j in late}))
                    self._end(r, Status.TIMEOUT, late,
                              f"group deadline of {self.spec.group_timeout_s:g}s passed during {r.stage.value}; "
                              f"ranks {_ranks(late)} on {hosts} had not returned")
            active = [r for r in active if not r.done]

    def _outstanding(self, r: _GroupRun) -> list:
        return [ref for ref in r.stage_refs() if not _is_ready(ref)] or r.stage_refs()

    def _advance(self, r: _GroupRun) -> None:
        """Move the group through every stage whose results are all in."""
        while not r.done:
            refs = r.stage_refs()
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            for j, ref in enumerate(refs):
                if ref in ready:
                    try:
                        ray.get(ref, timeout=0)
                    except Exception as e:
                        self._end(r, Status.FAILED, [j], f"rank {j} on {_where(r.base, j)}: {one_line(e)}")
                        return
            if len(ready) < len(refs):
                return
            results = ray.get(refs)
            if r.stage is Stage.JOIN:
                self._joined(r, results)
            elif r.stage is Stage.MEASURE:
                measured = rows.measured_rows(r.base, r.cases[r.next_case], results)
                r.rows += measured
                self._notify("rows_measured", measured)
                r.next_case += 1
                if r.next_case == len(r.cases):
                    r.stage = Stage.LEAVE
            else:
                self._end(r, Status.OK)

    def _joined(self, r: _GroupRun, joined: list[Joined]) -> None:
        r.base["devices"] = [x.device for x in joined]
        self._notify("group_joined", r.group, time.monotonic() - r.t0, joined)
        r.stage = Stage.MEASURE if r.cases else Stage.LEAVE

    # -- the end of a group ---------------------------------------------------------------
    def _end(self, r: _GroupRun, status: Status, failed: Sequence[int] = (), error: str | None = None) -> None:
        """Record what was not measured, write the group's rows, replace failed workers."""
        failure = None
        if status is not Status.OK:
            r.rows += rows.unmeasured_rows(r.base, r.cases[r.next_case:], status, error,
                                           None if status is Status.SKIPPED else failed)
            failure = {"status": status.value, "error": error, "group_id": r.group.group_id,
                       "ranks": [r.group.ranks[j] for j in failed],
                       "hosts": sorted({_where(r.base, j) for j in failed})}
        self.store.write_group(r.group.group_id, r.rows)
        r.done = True
        self._notify("group_ended", r.group, status, r.rows, failure)
        if status in (Status.FAILED, Status.TIMEOUT):
            try:
                self.pool.respawn(list(r.group.ranks))
            except PlacementError as e:
                self._notify("note", f"  could not replace the workers of group {r.group.group_id}: {e}")

    def _unavailable(self, g: Group, dead: set[str]) -> str | None:
        """Why the group cannot run (a node gone, a worker that could not be replaced), or None."""
        gone = sorted({self.pool.node_of(rank).ip for rank in g.ranks if self.pool.node_of(rank).node_id in dead})
        if gone:
            return f"node(s) {', '.join(gone)} left the cluster"
        missing = [rank for rank in g.ranks if self.pool.actor(rank) is None]
        if missing:
            return f"no worker for rank(s) {_ranks(missing)} (it could not be replaced)"
        return None

    def _actor(self, r: _GroupRun, j: int):
        return self.pool.actor(r.group.ranks[j])


def _where(base: dict, j: int) -> str:
    """Group rank j's host, with its IP (hostnames can coincide, as in the lab's namespaces)."""
    return f"{base['hosts'][j]} ({base['node_ips'][j]})"


def _is_ready(ref) -> bool:
    ready, _ = ray.wait([ref], timeout=0)
    return bool(ready)


def _ranks(ranks: Sequence[int]) -> str:
    return ",".join(map(str, ranks))
