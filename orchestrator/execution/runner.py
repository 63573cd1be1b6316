"""Runner: for each round, form its groups, run every case on them, turn samples into rows.

All calls of one group are queued on its actors at once (an actor runs its calls in order), and
one event loop waits on every group of the round with the nearest deadline as its timeout. A
group that raises or outlives its deadline is abandoned: its actors are killed and replaced, its
remaining measurements are recorded as `failed` or `timeout`, and the other groups go on.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

import ray

from orchestrator.execution import console
from orchestrator.execution import stats
from orchestrator.sweep.planner import Group, Plan
from orchestrator.execution.pool import ActorPool, PlacementError
from orchestrator.sweep.spec import SpecError, SweepSpec
from workloads import registry
from workloads.dtypes import ELEMENT_BYTES, NO_OP
from workloads.harness import OVERLAP


def build_cases(spec: SweepSpec, n: int) -> list[dict]:
    """Every (collective, dtype, op, in_place) with its rounded element counts, for n ranks."""
    cases = []
    for name in spec.collectives:
        # overlap measures all_reduce (sum, in place) against a matmul
        coll = registry.get("all_reduce" if name == OVERLAP else name)
        if n < coll.min_ranks:
            continue
        for dtype in spec.dtypes:
            counts = sorted({registry.round_count(coll.name, b, ELEMENT_BYTES[dtype], n) for b in spec.sizes()} - {0})
            if not counts:
                continue
            ops = ("sum",) if name == OVERLAP else spec.ops if coll.reduces else (NO_OP,)
            for op in ops:
                for in_place in coll.in_place_modes:
                    cases.append(
                        {
                            "collective": name,
                            "dtype": dtype,
                            "op": op,
                            "in_place": in_place,
                            "counts": counts,
                            "iters": spec.iters,
                            "warmup": spec.warmup,
                            "check_iters": spec.check_iters,
                            "root": spec.root,
                            "compute_flops": spec.compute_flops,
                        }
                    )
    return cases


def check_plan(spec: SweepSpec, plan: Plan) -> None:
    """Refuse what no group of the plan could run (before any actor starts)."""
    smallest = min(len(g.ranks) for g in plan.groups)
    if spec.root >= smallest and {"broadcast", "reduce"} & set(spec.collectives):
        raise SpecError(f"--root {spec.root}: the plan has groups of only {smallest} ranks")


@dataclass(eq=False)  # identity: runs are dictionary keys
class _GroupRun:
    group: Group
    base: dict
    cases: list[dict]
    deadline: float
    t0: float
    stage: str = "rendezvous"
    case_refs: list[list] = field(default_factory=list)
    join_refs: list = field(default_factory=list)
    leave_refs: list = field(default_factory=list)
    next_case: int = 0
    t_measured: float = 0.0
    measured_s: float = 0.0  # inside timed iterations
    rows: list[dict] = field(default_factory=list)
    done: bool = False


@dataclass
class Outcome:
    groups_ok: int = 0
    groups_failed: int = 0
    groups_skipped: int = 0
    rows: int = 0
    n_wrong: int = 0
    failures: list[dict] = field(default_factory=list)  # status, error, group_id, ranks, hosts
    device_names: set[str] = field(default_factory=set)
    measured_s: float = 0.0  # wall time inside timed iterations (per round, its longest group)
    setup_s: list[float] = field(default_factory=list)  # round start -> group formed, per group
    teardown_s: list[float] = field(default_factory=list)  # last measurement -> group left, per group
    first_row_at: float | None = None  # time.monotonic() of the first row


class Runner:
    def __init__(self, spec: SweepSpec, plan: Plan, pool: ActorPool, store, backend: str, run_base: dict) -> None:
        self.spec = spec
        self.plan = plan
        self.pool = pool
        self.store = store
        self.backend = backend
        self.run_base = run_base  # run_id, started_at
        self.outcome = Outcome()
        self._cases: dict[int, list[dict]] = {}

    def run(self, skip: set[str] = frozenset(), progress: console.Progress | None = None) -> Outcome:
        for rnd in self.plan.rounds:
            todo = [g for g in rnd if g.group_id not in skip]
            if todo:
                self._run_round(todo, len(rnd), progress)
        return self.outcome

    # -- one round ------------------------------------------------------------------------
    def _run_round(self, groups: list[Group], groups_in_round: int, progress) -> None:
        now = time.monotonic()
        dead = self.pool.refresh_nodes()
        runs = []
        for g in groups:
            base = self._base(g, groups_in_round)
            cases = self._cases.setdefault(len(g.ranks), build_cases(self.spec, len(g.ranks)))
            run = _GroupRun(g, base, cases, now + self.spec.group_timeout_s, now)
            print(console.group_line(g, base), flush=True)
            reason = self._unavailable(g, dead)
            if reason:
                self._skip(run, reason)
                if progress:
                    progress.group_done()
                continue
            runs.append(run)
        if runs:
            print(console.header(), flush=True)
        stores = {self._actor(r, 0).open_store.remote(self.spec.group_timeout_s): r for r in runs}
        # One wait for every group's store, so a slow rank 0 costs no other group its deadline.
        ready, _ = ray.wait(list(stores), num_returns=len(stores), timeout=self.spec.group_timeout_s)
        ready = set(ready)
        owner = {}
        for ref, r in stores.items():
            if ref not in ready:
                self._abandon(r, "timeout", [0], "rendezvous store on rank 0 did not open before the deadline")
                continue
            try:
                ip, port = ray.get(ref, timeout=0)
            except Exception as e:
                self._abandon(r, "failed", [0], f"rendezvous store on rank 0: {_error_text(e)}")
                continue
            self._submit(r, ip, port)
            for x in r.join_refs + [x for refs in r.case_refs for x in refs] + r.leave_refs:
                owner[x] = r
        self._event_loop([r for r in runs if not r.done], owner, progress)
        # Groups of a round measure at the same time: the round measured as long as its longest.
        self.outcome.measured_s += max((r.measured_s for r in runs), default=0.0)
        abandoned_early = sum(1 for r in runs if r.stage == "rendezvous")
        if progress and abandoned_early:
            progress.group_done(abandoned_early)

    def _submit(self, r: _GroupRun, ip: str, port: int) -> None:
        n = len(r.group.ranks)
        for j in range(n):
            actor = self._actor(r, j)
            spec = {
                "group_id": r.group.group_id,
                "rank": j,
                "world_size": n,
                "store_ip": ip,
                "store_port": port,
                "backend": self.backend,
                # Longer than the group's deadline, so the driver's deadline fires first and
                # names the ranks that hang, instead of a backend error on the ranks that wait.
                "timeout_s": self.spec.group_timeout_s + 30,
            }
            r.join_refs.append(actor.join.remote(spec))
        r.case_refs = [[self._actor(r, j).run.remote(case) for j in range(n)] for case in r.cases]
        r.leave_refs = [self._actor(r, j).leave.remote() for j in range(n)]
        r.stage = "join"

    def _event_loop(self, active: list[_GroupRun], owner: dict, progress) -> None:
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
                    late = [j for j, ref in enumerate(self._stage_refs(r)) if not _is_ready(ref)]
                    hosts = sorted({_where(r.base, j) for j in late})
                    self._abandon(
                        r, "timeout", late,
                        f"group deadline of {self.spec.group_timeout_s:g}s passed during {r.stage}; "
                        f"ranks {_ranks(late)} on {', '.join(hosts)} had not returned",
                    )
            finished = [r for r in active if r.done]
            if finished and progress:
                progress.group_done(len(finished))
            active = [r for r in active if not r.done]

    def _stage_refs(self, r: _GroupRun) -> list:
        if r.stage == "join":
            return r.join_refs
        if r.stage == "leave":
            return r.leave_refs
        return r.case_refs[r.next_case]

    def _outstanding(self, r: _GroupRun) -> list:
        return [ref for ref in self._stage_refs(r) if not _is_ready(ref)] or self._stage_refs(r)

    def _advance(self, r: _GroupRun) -> None:
        while not r.done:
            refs = self._stage_refs(r)
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            ready_set = set(ready)
            for j, ref in enumerate(refs):
                if ref in ready_set:
                    try:
                        ray.get(ref, timeout=0)
                    except Exception as e:
                        host = _where(r.base, j)
                        self._abandon(r, "failed", [j], f"rank {j} on {host}: {_error_text(e)}")
                        return
            if len(ready) < len(refs):
                return
            results = ray.get(refs)
            if r.stage == "join":
                r.base["devices"] = [x["device"] for x in results]
                self.outcome.device_names.update(x["device_name"] for x in results)
                self.outcome.setup_s.append(time.monotonic() - r.t0)
                r.stage = "measure" if r.cases else "leave"
            elif r.stage == "measure":
                self._record(r, r.cases[r.next_case], results)
                r.next_case += 1
                if r.next_case == len(r.cases):
                    r.stage = "leave"
                    r.t_measured = time.monotonic()
            else:
                self._finish(r)

    # -- rows -----------------------------------------------------------------------------
    def _record(self, r: _GroupRun, case: dict, per_rank: list[list[dict]]) -> None:
        n = len(r.group.ranks)
        overlap = case["collective"] == OVERLAP
        factor = registry.get("all_reduce" if overlap else case["collective"]).busbw_factor(n)
        for k, count in enumerate(case["counts"]):
            samples = [rank_results[k] for rank_results in per_rank]
            timing = stats.combine([s["iter_time_us"] for s in samples])
            msg_bytes = count * ELEMENT_BYTES[case["dtype"]]
            algbw = stats.algbw_gbps(msg_bytes, timing["time_us"])
            row = {
                **self._case_fields(r, case, count),
                **timing,
                "algbw_gbps": algbw,
                "busbw_gbps": stats.busbw_gbps(algbw, factor),
                "n_wrong": sum(s["n_wrong"] for s in samples),
                "status": "ok",
            }
            if overlap:
                row.update(_overlap_fields(samples, timing["time_us"]))
            r.measured_s += sum(timing["iter_time_us"]) / 1e6
            if self.outcome.first_row_at is None:
                self.outcome.first_row_at = time.monotonic()
            self.outcome.n_wrong += row["n_wrong"]
            r.rows.append(row)
            print(console.row_line(row), flush=True)

    def _case_fields(self, r: _GroupRun, case: dict, count: int) -> dict:
        return {
            **r.base,
            "collective": case["collective"],
            "dtype": case["dtype"],
            "op": case["op"],
            "in_place": case["in_place"],
            "msg_bytes": count * ELEMENT_BYTES[case["dtype"]],
            "count": count,
            "iters": case["iters"],
            "warmup": case["warmup"],
            "check_iters": case["check_iters"],
        }

    def _abandon(self, r: _GroupRun, status: str, failed: list[int], error: str) -> None:
        """Record every measurement not yet done as `status`, replace the group's actors."""
        first = r.next_case if r.stage in ("measure", "leave") else 0
        for case in r.cases[first:] if r.stage != "leave" else []:
            for count in case["counts"]:
                row = {**self._case_fields(r, case, count), "status": status, "error": error,
                       "failed_ranks": failed}
                r.rows.append(row)
        if not r.rows or r.stage == "leave":
            r.rows.append({**r.base, "status": status, "error": error, "failed_ranks": failed})
        print(f"  {status.upper()}: group {r.group.group_id}: {error}", flush=True)
        self.outcome.failures.append(
            {
                "status": status,
                "error": error,
                "group_id": r.group.group_id,
                "ranks": [r.group.ranks[j] for j in failed],
                "hosts": sorted({_where(r.base, j) for j in failed}),
            }
        )
        self.outcome.groups_failed += 1
        self._write(r)
        r.done = True
        try:
            self.pool.respawn(list(r.group.ranks))
        except PlacementError as e:
            print(f"  could not replace the workers of group {r.group.group_id}: {e}", flush=True)

    def _unavailable(self, g: Group, dead: set[str]) -> str | None:
        """Why the group cannot run (a node gone, a worker that could not be replaced), or None."""
        gone = sorted({self.pool.node_of(rank).ip for rank in g.ranks if self.pool.node_of(rank).node_id in dead})
        if gone:
            return f"node(s) {', '.join(gone)} left the cluster"
        missing = [rank for rank in g.ranks if self.pool.actors[rank] is None]
        if missing:
            return f"no worker for rank(s) {_ranks(missing)} (it could not be replaced)"
        return None

    def _skip(self, r: _GroupRun, reason: str) -> None:
        for case in r.cases:
            for count in case["counts"]:
                r.rows.append({**self._case_fields(r, case, count), "status": "skipped", "error": reason})
        print(f"  SKIPPED: group {r.group.group_id}: {reason}", flush=True)
        self.outcome.groups_skipped += 1
        self.outcome.failures.append(
            {"status": "skipped", "error": reason, "group_id": r.group.group_id, "ranks": list(r.group.ranks),
             "hosts": sorted({_where(r.base, j) for j in range(len(r.group.ranks))})}
        )
        self._write(r)
        r.done = True

    def _finish(self, r: _GroupRun) -> None:
        if r.t_measured:
            self.outcome.teardown_s.append(time.monotonic() - r.t_measured)
        self.outcome.groups_ok += 1
        self._write(r)
        r.done = True

    def _write(self, r: _GroupRun) -> None:
        self.store.write_group(r.group.group_id, r.rows)
        self.outcome.rows += len(r.rows)

    # -- helpers --------------------------------------------------------------------------
    def _actor(self, r: _GroupRun, j: int):
        return self.pool.actors[r.group.ranks[j]]

    def _base(self, g: Group, groups_in_round: int) -> dict:
        infos = [self.pool.info[rank] for rank in g.ranks]
        node_ids = [i["node_id"] for i in infos]
        per_node = defaultdict(int)
        for nid in node_ids:
            per_node[nid] += 1
        n, n_nodes = len(g.ranks), len(per_node)
        topology = "intra" if n_nodes == 1 else "inter" if n_nodes == n else "mixed"
        pair = [self.pool.inv.nodes[i].node_id for i in g.pair] if g.pair else None
        return {
            **self.run_base,
            "backend": self.backend,
            "world_size": n,
            "n_nodes": n_nodes,
            "ranks_per_node": max(per_node.values()),
            "topology": topology,
            "pattern": g.pattern,
            "group_id": g.group_id,
            "round": g.round,
            "groups_in_round": groups_in_round,
            "ranks": list(g.ranks),
            "hosts": [i["hostname"] for i in infos],
            "node_ips": [i["node_ip"] for i in infos],
            "node_ids": node_ids,
            "devices": [f"gpu:{i['gpu_ids'][0]}" if i["gpu_ids"] else "cpu" for i in infos],
            "pids": [i["pid"] for i in infos],
            "pair_nodes": pair,
        }


def _overlap_fields(samples: list[dict], comm_us: float) -> dict:
    """T_comp, T_step (means of per-iteration maxima over ranks) and what follows from them."""
    comp = stats.combine([s["comp_us"] for s in samples])["time_us"]
    step = stats.combine([s["step_us"] for s in samples])["time_us"]
    hidden = comp + comm_us - step
    return {"t_comp_us": comp, "t_comm_us": comm_us, "t_step_us": step, "t_overlap_us": hidden,
            "overlap_efficiency": hidden / min(comp, comm_us), "compute_flops": samples[0]["compute_flops"]}


def _where(base: dict, j: int) -> str:
    """Group rank j's host, with its IP (hostnames can coincide, as in the lab's namespaces)."""
    return f"{base['hosts'][j]} ({base['node_ips'][j]})"


def _is_ready(ref) -> bool:
    ready, _ = ray.wait([ref], timeout=0)
    return bool(ready)


def _ranks(ranks: list[int]) -> str:
    return ",".join(map(str, ranks))


def _error_text(e: BaseException) -> str:
    """One line for a Ray error: the exception type and the first line of its message."""
    cause = getattr(e, "cause", None)
    if isinstance(cause, BaseException):
        e = cause
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    text = lines[0] if lines else ""
    return f"{type(e).__name__}: {text}"[:300]
