"""The watch loop (operations.watch says what a cycle does): cycles until --cycles, SIGTERM or
Ctrl-C, each a composition of the other operations (a sweep as `run`, `compare` against the
rolling baseline, the report's flags, a qualification of the suspects), and what a long job meets:
signals, reconnects, retention, metrics."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import signal
import threading
import time
from collections.abc import Callable

from orchestrator.errors import ConnectTimeout, UsageError, first_line
from orchestrator.execution.canary import (
    BLIND_CYCLES,
    FLAP_WINDOW,
    Alert,
    AlertKind,
    Cycle,
    blind_alert,
    busy_nodes,
    fit_cpu_ranks,
    flapping_alerts,
    suspects,
)
from orchestrator.execution.voice import QUIET
from orchestrator.operations import watch_cycle
from orchestrator.results.retention import drop_expired
from orchestrator.results.schema import RunState
from orchestrator.scheduler import Done, Scheduler
from orchestrator.sweep.inventory import Node
from orchestrator.sweep.planner import nodes_needed
from orchestrator.sweep.spec import SweepSpec
from orchestrator.sweep.topology import Topology

PARTITION = "date={:%Y-%m-%d}"
RELEASE_TIMEOUT_S = 15.0  # at most this long for a cycle's own workers to be gone before the next reads what is free
RELEASE_SETTLE_S = 0.5


class Watch:
    """Cycles until `cycles` have run (0: forever), SIGTERM or Ctrl-C. `emit(cycle)` says each one;
    `live_line`: each cycle's progress redrawn in place while it measures, where stderr is a terminal."""

    def __init__(self, spec: SweepSpec, *, every_s: float, cycles: int, threshold: float, min_fraction: float,
                 user_entries: list, baseline_cycles: int, retention_days: int | None, reconnect_s: float,
                 emit: Callable[[Cycle], None], say: Callable[[str], None], doctor: bool = True,
                 fit_ranks: bool = False, switches: Topology | None = None, sched: Scheduler = Scheduler.NONE,
                 drain: bool = False, reread: Callable[[], Topology | None] | None = None,
                 live_line: bool = False) -> None:
        self.spec, self.every_s, self.cycles = spec, every_s, cycles
        self.threshold, self.min_fraction, self.user_entries = threshold, min_fraction, user_entries
        self.baseline_cycles, self.retention_days, self.reconnect_s = baseline_cycles, retention_days, reconnect_s
        self.emit, self.say, self.doctor, self.live_line = emit, say, doctor, live_line
        self.fit_ranks = fit_ranks  # CPU ranks fitted to the nodes (no --ranks-per-node given)
        self.recent: list[Cycle] = []  # the last cycles, for the blind alert
        self.said_small: set[str] = set()  # nodes already said to be too small (said once)
        self.cycle_ranks = spec.ranks_per_node
        self.clean_runs: list[str] = []  # runs of cycles that raised no alert: the rolling baseline
        self.switches, self.sched, self.drain = switches, sched, drain  # --topology; --scheduler, --drain
        self.reread = reread  # the tree read again where a node is under none of it (node labels)
        self.said_unplaced: set[str] = set()  # nodes the switch tree does not list (said once)
        self.names: dict[str, str] = {}  # node IP -> the name its scheduler takes it out of service by
        self.drained: dict[str, Done] = {}  # node IP -> how --drain went (run once per node per watch)
        self.connection = None
        self.stopping = False
        self._metrics = None

    # the process ends after writing what it has: a signal between cycles ends the wait at once,
    # one in a cycle ends the cycle's sweep as Ctrl-C ends a run (its rows kept)
    def _stop(self, signum, frame) -> None:
        self.stopping = True
        raise KeyboardInterrupt

    def run(self) -> int:
        from orchestrator.execution import connect

        previous = signal.signal(signal.SIGTERM, self._stop) if _main_thread() else None
        try:
            self.connection = connect.connect(self.spec.address, self.spec.verbose)
            self.say(f"collbench: watch on {self.connection.where}: a cycle every {self.every_s:g}s, rows -> "
                     f"{self.spec.output}")
            watch_cycle.check_listed(self.switches, self.spec)  # a file's unlisted node: exit 2, as qualify
            self.clean_runs = watch_cycle.earlier_runs(self.spec, self.baseline_cycles)
            n = 0
            while not self.stopping and (self.cycles == 0 or n < self.cycles):
                n += 1
                t0 = time.monotonic()
                cycle = self._cycle(n)
                self.emit(cycle)
                if self.stopping or (self.cycles and n >= self.cycles):
                    break
                self._sleep(max(0.0, self.every_s - (time.monotonic() - t0)))
        except KeyboardInterrupt:
            self.stopping = True
        except _Lost as e:
            self.say(f"collbench: error: {e}")
            return 1
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
            connect.disconnect(self.connection)
        blind = next((a for a in self.recent[-1].alerts if a.kind == AlertKind.BLIND), None) if self.recent else None
        self.say("collbench: watch ended" + (" (signal)" if self.stopping else "")
                 + (f"; {blind.message}" if blind else ""))
        return 0

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.stopping and time.monotonic() < deadline:
            time.sleep(min(1.0, deadline - time.monotonic()))

    def _cycle(self, n: int) -> Cycle:
        started = dt.datetime.now(dt.timezone.utc)
        cycle = Cycle(n, started)
        t0 = time.monotonic()
        try:
            self._measure(cycle, started)
        except KeyboardInterrupt:  # SIGTERM or Ctrl-C after the sweep: what it wrote stays, the cycle is said
            self.stopping = True
            cycle.note = "stopped by a signal: the rows measured so far are kept"
        except UsageError as e:  # nothing to measure this cycle (every node busy, one node left, ...)
            cycle.note = str(e)
        except Exception as e:  # the cluster went away under the cycle: join again, or end
            if not self._cluster_lost(e):
                raise
            cycle.note = f"the Ray cluster stopped answering ({first_line(e)}); joined it again"
        self._wait_released([cycle.run_id, cycle.qualify_run_id])
        self.recent = (self.recent + [cycle])[-max(BLIND_CYCLES, FLAP_WINDOW):]
        blind = blind_alert(self.recent, BLIND_CYCLES)
        if blind:
            cycle.alerts.append(blind)
        cycle.alerts += flapping_alerts(self.recent)
        for line in watch_cycle.take_out(cycle, self.names, self.sched, self.drain, self.drained):
            self.say(line)
        cycle.wall_s = time.monotonic() - t0
        self._export(cycle)
        if self.retention_days is not None:
            self._drop_expired(started.date())
        return cycle

    def _measure(self, cycle: Cycle, started: dt.datetime) -> None:
        import ray
        from ray._private import state

        from orchestrator.execution import jobs
        from orchestrator.execution.doctor import QUICK, DoctorRefusal
        from orchestrator.sweep import inventory

        nodes = ray.nodes()
        totals = {n["NodeID"]: n.get("Resources", {}) for n in nodes if n.get("Alive")}
        inv = watch_cycle.selected(self.spec, nodes, self.spec.ranks_per_node)
        ranks, small = fit_cpu_ranks(inv, totals, CPUS_PER_RANK, self.spec.ranks_per_node, self.fit_ranks)
        if ranks != self.spec.ranks_per_node:
            inv = watch_cycle.selected(self.spec, nodes, ranks)
        cycle.ranks_per_node = ranks if any(not n.gpus for n in inv.nodes) else None
        self.cycle_ranks = ranks
        cycle.nodes_too_small = sorted(small)
        for ip in sorted(set(small) - self.said_small):  # said once, with the fix
            self.say(f"collbench: watch: node {ip} is {small[ip]}")
        self.said_small |= set(small)
        fit = [n for n in inv.nodes if n.ip not in small]
        busy = busy_nodes(inventory.Inventory(fit), state.available_resources_per_node(), CPUS_PER_RANK)
        cycle.nodes_busy = [n.ip for n in busy]
        idle = [n for n in fit if n not in busy]
        cycle.nodes_checked = [n.ip for n in idle]
        if not fit:
            raise UsageError(f"every node is too small for {ranks} rank(s): nothing measured this cycle")
        if not idle:
            raise UsageError("every node is busy: nothing measured this cycle")
        # the patterns this cycle's nodes can form (a cycle of one idle node has no pairs)
        patterns = tuple(p for p in self.spec.patterns if nodes_needed(p) <= len(idle))
        if not patterns:
            raise UsageError(f"{len(idle)} idle node(s): no group of --patterns {','.join(self.spec.patterns)} to run")
        spec = dataclasses.replace(self.spec, nodes=tuple(n.node_id for n in idle), exclude=(), patterns=patterns,
                                   ranks_per_node=ranks)
        partition = PARTITION.format(started)
        try:
            result = jobs.sweep(spec, voice=QUIET, partition=partition, cpus_per_rank=CPUS_PER_RANK,
                                command="watch", doctor=self.doctor, live_line=self.live_line)
        except DoctorRefusal as e:  # a node that would hang or fail the canary: an alert, not a silence
            cycle.alerts = [Alert(node, AlertKind.DOCTOR, None, None, f"{node} ({host}): {c.name}: {c.detail}; {c.hint}")
                            for node, host, c in e.diagnosis.failures(QUICK)]
            cycle.note = "the quick checks failed: nothing measured this cycle"
            return
        cycle.run_id = result.run_id
        if result.state is not RunState.FINISHED and result.exit_code in (130, 138, 143):
            self.stopping = True
            cycle.note = "stopped by a signal: the rows measured so far are kept"
            return
        if result.message and result.state is not RunState.FINISHED:
            cycle.note = result.message.removeprefix("collbench: error: ")
            if not result.outcome.rows:
                return
        self._judge(cycle, result.run_id, idle, partition)
        if not cycle.alerts and result.state is RunState.FINISHED:
            self.clean_runs = (self.clean_runs + [result.run_id])[-self.baseline_cycles:]

    def _judge(self, cycle: Cycle, run_id: str, idle: list[Node], partition: str) -> None:
        """The cycle's verdicts (watch_cycle): its drift and flags, a slow uplink as the switch's
        alert, the suspects qualified, and what takes each named node out of service."""
        leaf_of, unplaced = watch_cycle.leaves(self.switches, idle)
        if unplaced and self.reread is not None:  # a pod started again elsewhere: the labels read anew
            try:
                self.switches = self.reread()
                leaf_of, unplaced = watch_cycle.leaves(self.switches, idle)
            except UsageError as e:
                self.say(f"collbench: watch: warning: {e}; the switch tree read before is kept")
        for node in (n for n in unplaced if n.ip not in self.said_unplaced):  # said once
            self.say(f"collbench: watch: node {node.ip} ({node.hostname}) is under no switch of "
                     f"{self.switches.source}: judged without a leaf")
            self.said_unplaced.add(node.ip)
        drops, evidence, cycle.drift = watch_cycle.drift(self.spec.output, self.clean_runs, run_id, self.threshold)
        parents = self.switches.parent_of() if self.switches else {}
        flags = watch_cycle.flags(self.spec.output, run_id, self.threshold, self.user_entries, self.min_fraction,
                                  leaf_of, parents)
        cycle.alerts = watch_cycle.uplink_alerts([f for f in flags if str(f.kind) == AlertKind.SLOW_UPLINK.value])
        below = watch_cycle.below(cycle.alerts, leaf_of, parents)
        doubted = suspects(drops, flags, uplinks=below)
        cycle.doubted = sorted(doubted)
        if doubted:  # a drop across a slow uplink is its evidence: no node's, even one qualify cannot judge
            evidence = {ip: e for ip, e in evidence.items() if ip in doubted}
            cycle.qualify_run_id, alerts, found = watch_cycle.qualify_suspects(
                self.spec, idle, doubted, evidence, partition=partition, threshold=self.threshold,
                min_fraction=self.min_fraction, user_entries=self.user_entries, ranks=self.cycle_ranks,
                cpus_per_rank=CPUS_PER_RANK, switches=self.switches)
            known = {a.node for a in cycle.alerts}
            cycle.alerts += [a for a in alerts if a.node not in known]
            self.names.update(watch_cycle.scheduler_names(found, self.sched))
            named = {a.node for a in cycle.alerts if a.kind is not AlertKind.SLOW_UPLINK}
            cycle.doubted = sorted(suspects(drops, flags, named, watch_cycle.below(cycle.alerts, leaf_of, parents)))

    def _wait_released(self, run_ids: list[str | None], timeout_s: float = RELEASE_TIMEOUT_S) -> None:
        """Until the cycle's workers (collbench-RUN-rankR) are gone, lest the next cycle read what they
        held as another job's (after a qualify, two nodes read busy). A worker Ray never reaps is left."""
        import ray

        prefixes = tuple(f"collbench-{r}-rank" for r in run_ids if r)
        if not prefixes:
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                alive = [a for a in ray.util.list_named_actors(all_namespaces=True)
                         if (a["name"] if isinstance(a, dict) else a).startswith(prefixes)]
            except Exception:  # noqa: BLE001 - the cluster went away: the next cycle finds out
                return
            if not alive:
                time.sleep(RELEASE_SETTLE_S)  # the raylet returns the resources just after the actor dies
                return
            time.sleep(0.2)

    # -- what a long job meets ------------------------------------------------------------
    def _cluster_lost(self, error: Exception) -> bool:
        """Whether `error` says the cluster went away; if so, join it again or raise _Lost."""
        import ray

        from orchestrator.execution import connect

        try:
            ray.nodes()
            return False  # the cluster answers: the error was something else
        except Exception:
            pass
        if self.spec.address is None and not _env_address():
            raise _Lost("the embedded Ray instance stopped")
        deadline = time.monotonic() + self.reconnect_s
        while time.monotonic() < deadline and not self.stopping:
            ray.shutdown()
            try:
                self.connection = connect.connect(self.spec.address, self.spec.verbose)
                return True
            except ConnectTimeout:  # ray.init stuck in its thread: the command line ends the process
                raise
            except (UsageError, ConnectionError, RuntimeError):
                time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))
        raise _Lost(f"lost the Ray cluster at {self.spec.address or _env_address()} and could not join it again "
                    f"within {self.reconnect_s:g} s ({first_line(error)})")

    def _export(self, cycle: Cycle) -> None:
        from orchestrator.execution.metrics import WatchMetrics

        if self._metrics is None:
            self._metrics = WatchMetrics()
        self._metrics.cycle_ended(cycle, time.time())

    def _drop_expired(self, today: dt.date) -> None:
        for folder, runs in drop_expired(self.spec.output, today, self.retention_days):
            self.say(f"collbench: watch: dropped {folder} ({runs} run(s), older than {self.retention_days} days)")


# Each CPU rank of a cycle asks Ray for one CPU (a benchmark run asks none): a node whose CPUs
# another job holds is then seen as busy, and is never shared with it.
CPUS_PER_RANK = 1.0


class _Lost(Exception):
    """The Ray cluster is gone and could not be joined again."""


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _env_address() -> str | None:
    return os.environ.get("RAY_ADDRESS")
