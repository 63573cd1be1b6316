"""Live metrics of a run through `ray.util.metrics`, an observer of the runner like the console.

Each node's Ray metrics agent exports them to Prometheus (at the node's metrics export port, names
prefixed `ray_`, counters suffixed `_total`); the dashboard in docs/grafana/collbench.json shows
them. Every series carries the run id, so runs sharing a cluster stay apart:

- collbench_busbw_gbps, collbench_time_us: the latest ok measurement per (collective, dtype, op,
  in_place, topology, pattern, msg_bytes);
- collbench_groups_total by status (ok, failed, timeout, skipped), collbench_rows_total;
- collbench_round (the round being measured), collbench_groups_planned (0 when open-ended);
- and watch's, per cycle (WatchMetrics): collbench_alerts_total by node and kind, the last cycle's
  duration and end time, the nodes it checked and skipped as busy.
"""

from __future__ import annotations

from orchestrator.execution.events import GroupEnded, RoundStarted, RowsMeasured, RunObserver
from workloads.messages import Status

MEASUREMENT_TAGS = ("run_id", "collective", "dtype", "op", "in_place", "topology", "pattern", "msg_bytes")
NAMES = ("collbench_busbw_gbps", "collbench_time_us", "collbench_groups", "collbench_rows", "collbench_round",
         "collbench_groups_planned")
# watch's, exported as ray_<name> (counters with _total): docs/prometheus/collbench-alerts.yml, the Grafana board
WATCH_NAMES = ("collbench_alerts", "collbench_watch_last_cycle_seconds", "collbench_watch_last_cycle_timestamp_seconds",
               "collbench_watch_nodes_checked", "collbench_watch_nodes_busy")


class RunMetrics(RunObserver):
    def __init__(self, run_id: str, groups_planned: int) -> None:
        from ray.util.metrics import Counter, Gauge

        self.run_id = run_id
        run = ("run_id",)
        self.busbw = Gauge(NAMES[0], "bus bandwidth of the latest ok measurement, GB/s", MEASUREMENT_TAGS)
        self.time = Gauge(NAMES[1], "time of the latest ok measurement (slowest rank, mean), us", MEASUREMENT_TAGS)
        self.groups = Counter(NAMES[2], "groups ended, by status", ("run_id", "status"))
        self.rows = Counter(NAMES[3], "rows written", run)
        self.round = Gauge(NAMES[4], "round being measured", run)
        self.planned = Gauge(NAMES[5], "groups the run will measure (0: decided as it goes)", run)
        self.planned.set(groups_planned, tags={"run_id": run_id})

    def round_started(self, event: RoundStarted) -> None:
        self.round.set(event.round_no, tags={"run_id": self.run_id})

    def rows_measured(self, event: RowsMeasured) -> None:
        for row in event.rows:
            if row["status"] == Status.OK.value:
                tags = {k: str(row[k]) for k in MEASUREMENT_TAGS}
                self.busbw.set(row["busbw_gbps"], tags=tags)
                self.time.set(row["time_us"], tags=tags)

    def group_ended(self, event: GroupEnded) -> None:
        self.groups.inc(1, tags={"run_id": self.run_id, "status": event.status.value})
        if event.rows:
            self.rows.inc(len(event.rows), tags={"run_id": self.run_id})


class WatchMetrics:
    """A watch's metrics, set once per cycle (`cycle`: an execution.canary.Cycle)."""

    def __init__(self) -> None:
        from ray.util.metrics import Counter, Gauge

        self.alerts = Counter(WATCH_NAMES[0], "alerts raised by collbench watch, by node and kind", ("node", "kind"))
        self.seconds = Gauge(WATCH_NAMES[1], "duration of the last watch cycle, s")
        self.at = Gauge(WATCH_NAMES[2], "when the last watch cycle ended (unix)")
        self.checked = Gauge(WATCH_NAMES[3], "nodes the last watch cycle measured")
        self.busy = Gauge(WATCH_NAMES[4], "nodes the last watch cycle skipped as busy")

    def cycle_ended(self, cycle, now_s: float) -> None:
        for a in cycle.alerts:
            self.alerts.inc(1, tags={"node": a.node, "kind": a.kind})
        self.seconds.set(cycle.wall_s)
        self.at.set(now_s)
        self.checked.set(len(cycle.nodes_checked))
        self.busy.set(len(cycle.nodes_busy))
