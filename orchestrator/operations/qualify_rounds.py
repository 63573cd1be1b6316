"""A qualification's rounds on Ray (operations.qualifying runs the rest): each round's probes as
one round of groups of whole nodes, what each probe reached collected back as the qualifier's
results (a probe that hung or failed with the nodes that did not answer or left), and each
round's line. SIGUSR1 ends the rounds after the one in flight."""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass

from orchestrator.execution import signals
from orchestrator.execution.console import Console
from orchestrator.execution.events import GroupEnded, GroupFailure, GroupStarted, RunObserver
from orchestrator.execution.live import Work
from orchestrator.execution.voice import Voice
from orchestrator.sweep.estimate import Rates, estimate
from orchestrator.sweep.inventory import Inventory
from orchestrator.sweep.planner import Group, Plan
from orchestrator.sweep.qualify import Deadlines, Outcome, Probe, Qualifier, Result
from workloads.messages import Status


@dataclass
class RoundProgress:
    """Each round's live line (execution.live): its probes' cases priced at `rates` on `backend`
    (sweep.estimate; the start-up is behind it), drawn by `console` while the round runs."""

    console: Console
    rates: Rates
    backend: str

    def begin(self, rnd: int, plan: Plan, spec, inv: Inventory) -> None:
        guess = estimate(plan, spec, inv, self.rates, self.backend)
        work = Work(guess.cases_s, max(0.0, guess.seconds - self.rates.start_s))
        self.console.begin(work, label=f"round {rnd + 1}: ", unit="probes")


def run_rounds(q: Qualifier, inv: Inventory, runner, collector: Collector, voice: Voice,
               done: dict, progress: RoundProgress | None = None) -> list[int] | None:
    """The qualifier's rounds on Ray until it has every verdict (None; `done["groups"]` counts the
    probes run); where SIGUSR1 came (Slurm's warning ahead of a time limit), none more after the round
    in flight: the qualifier stops with what the rounds so far settled, and the nodes without a
    verdict are returned. `progress`: a live line while each round runs, gone before its line."""
    while probes := q.next_round():
        if signals.stop_requested():
            break
        rnd = q.rounds - 1
        plan = Plan((tuple(Group(f"q{rnd}-g{i}", "qualify", rnd, _ranks(inv, p), phase=p.phase.value)
                           for i, p in enumerate(probes)),))
        collector.expect(plan, probes)
        runner.spec = dataclasses.replace(runner.spec, group_timeout_s=collector.limit_s(probes))
        if progress is not None:
            progress.begin(rnd, plan, runner.spec, inv)
        try:
            runner.run(plan)
        except signals.StopRequested:  # the runner saw SIGUSR1 first: nothing of this round ran
            break
        finally:
            if progress is not None:
                progress.console.close()
        judged = q.record(collector.results())
        done["groups"] += len(probes)
        voice.say(round_line(rnd, probes, judged, runner.spec.group_timeout_s, q))
    else:
        return None
    return q.stop("SIGUSR1, ahead of a time limit", unrun=probes)


def _ranks(inv: Inventory, probe: Probe) -> tuple[int, ...]:
    first = inv.first_rank()
    return tuple(first[i] + j for i in probe.nodes for j in range(inv.nodes[i].ranks))


class Collector(RunObserver):
    """The runner's observer for qualify: each probe's group ends as a qualify Result (its busbw at
    the largest size; who hung, died or left), and how long it took sets the next deadlines."""

    def __init__(self, inv: Inventory, deadlines: Deadlines) -> None:
        self.inv, self.deadlines = inv, deadlines
        self._probes: dict[str, Probe] = {}
        self._t0: dict[str, float] = {}
        self._results: list[Result] = []
        self._node = [i for i, n in enumerate(inv.nodes) for _ in range(n.ranks)]  # global rank -> node

    def expect(self, plan, probes: list[Probe]) -> None:
        self._probes = {g.group_id: p for g, p in zip(plan.groups, probes)}
        self._results = []

    def limit_s(self, probes: list[Probe]) -> float:
        return max(self.deadlines.limit_s(p.phase) for p in probes)

    def results(self) -> list[Result]:
        return self._results

    def group_started(self, event: GroupStarted) -> None:
        self._t0[event.group.group_id] = time.monotonic()

    def group_ended(self, event: GroupEnded) -> None:
        group, status, rows = event.group, event.status, event.rows
        probe = self._probes[group.group_id]
        wall = time.monotonic() - self._t0[group.group_id]
        if status is Status.OK:
            top = [r for r in rows if r["msg_bytes"] == max(x["msg_bytes"] for x in rows)]
            wrong = sum(r["n_wrong"] for r in rows)
            if wrong:
                result = Result(probe, Outcome.FAILED, None, (), f"{wrong} wrong element(s) in the checks")
            else:
                self.deadlines.took(probe.phase, wall)
                result = Result(probe, Outcome.PASS, statistics.median(r["busbw_gbps"] for r in top))
        else:
            result = self._failed(probe, status, event.failure)
        self._results.append(dataclasses.replace(result, group_id=group.group_id))

    def _failed(self, probe: Probe, status: Status, failure: GroupFailure) -> Result:
        """Culprits: nodes that left; else the nodes of ranks that did not answer a ping or died
        (none when every rank answered: the qualifier retests the members)."""
        nodes = sorted({self._node[r] for r in failure.ranks})
        gone = _gone(self.inv, nodes)
        if gone:
            return Result(probe, Outcome.LOST, None, gone, failure.error)
        if status is Status.SKIPPED:  # no worker could be placed there
            return Result(probe, Outcome.FAILED, None, tuple(nodes), failure.error)
        culprits = tuple(nodes) if failure.culprits else ()
        return Result(probe, Outcome.of_run(status), None, culprits, failure.error)


def _gone(inv: Inventory, nodes: list[int]) -> tuple[int, ...]:
    """Those of these nodes that have left the Ray cluster."""
    if not nodes:
        return ()
    import ray

    alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
    return tuple(i for i in nodes if inv.nodes[i].node_id not in alive)


def round_line(rnd: int, probes: list[Probe], judged: list[Result], limit_s: float, q: Qualifier) -> str:
    """A round's phases (a round holds fresh pairs and retests at once), outcomes and the count named."""
    phases = dict.fromkeys(p.phase.value for p in probes)
    counts: dict[str, int] = {}
    for r in judged:
        counts[r.status.value] = counts.get(r.status.value, 0) + 1
    found = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    return (f"collbench: round {rnd + 1} ({'+'.join(phases)}): {len(probes)} probe(s) [{found}], "
            f"deadline {limit_s:.0f}s; {q.named()} node(s) named so far")
