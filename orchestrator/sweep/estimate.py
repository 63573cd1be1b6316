"""How long a run will take, said before it starts (`collbench plan` and `collbench run`). Pure.

A run is its start-up, then its rounds one after another; the groups of a round run side by side,
so a round lasts as long as its slowest group. A group's time is its calls (every warm-up, timed
and check iteration of every size, as the harness makes them: the timed ones once on a host clock,
twice on a GPU) at a per-call latency plus the bytes at a bus bandwidth (nccl-tests' definition, so
`time = latency + msg_bytes * busbw_factor(n) / busbw`), plus what a round costs beyond its calls
(forming the process groups, allocating and checking buffers).

The rates come from an earlier run of the same backend on the same hosts where the output folder
holds one (`Rates.learned`: its own measured latency and bus bandwidth inside nodes and across
them, and its own wall time less its calls, per round), else from stated defaults (`DEFAULTS`):
an estimate, said with where its rates came from, never a promise.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from dataclasses import dataclass, field

import pandas as pd

from orchestrator.sweep.inventory import Inventory
from orchestrator.sweep.planner import Plan, build_cases, one_size_each
from orchestrator.sweep.spec import SweepSpec
from workloads import registry
from workloads.dtypes import ELEMENT_BYTES


@dataclass(frozen=True)
class Rates:
    """What a call and a round cost: per-call latency (us) and bus bandwidth (GB/s) inside a node
    and across nodes, seconds a round costs beyond its calls, seconds to start; where they came from."""

    latency_us: dict[str, float]  # "intra" / "inter", and "intra:all_gather" ... where one run measured it
    busbw_gbps: dict[str, float]
    round_s: float
    start_s: float
    basis: str
    load_per_cpu: float | None = None  # the learning run's hosts while it measured (its ranks too), median

    def of(self, where: str, collective: str) -> tuple[float, float]:
        """(latency us, bus bandwidth GB/s) of `collective` inside a node or across: its own where
        measured, else its kind's."""
        key = f"{where}:{collective}"
        return self.latency_us.get(key, self.latency_us[where]), self.busbw_gbps.get(key, self.busbw_gbps[where])

    @classmethod
    def learned(cls, rows: pd.DataFrame, manifest: dict, fallback: Rates) -> Rates | None:
        """From an earlier run's ok rows and manifest (start, finish, start-up times): each
        collective's latency (its smallest size's time) and bus bandwidth (at its largest size)
        inside nodes and across, their medians for the collectives it did not measure; None where
        they cannot say (no ok row, no finish time)."""
        ok = rows[rows.status == "ok"]
        started, finished = manifest.get("started_at"), manifest.get("finished_at")
        if ok.empty or started is None or finished is None:
            return None
        latency, busbw = dict(fallback.latency_us), dict(fallback.busbw_gbps)
        ok = ok.assign(where=ok.topology.map(_where))
        for where, mine in ok.groupby("where"):
            per = {}
            for collective, its in mine.groupby("collective"):
                small, large = its[its.msg_bytes == its.msg_bytes.min()], its[its.msg_bytes == its.msg_bytes.max()]
                per[collective] = (float(small.time_us.median()), max(float(large.busbw_gbps.median()), 1e-6))
                latency[f"{where}:{collective}"], busbw[f"{where}:{collective}"] = per[collective]
            latency[where] = float(pd.Series([v[0] for v in per.values()]).median())
            busbw[where] = float(pd.Series([v[1] for v in per.values()]).median())
        start_s = sum(float(manifest.get(k) or 0.0) for k in
                      ("startup_connect_s", "startup_probe_s", "startup_workers_s", "startup_first_join_s"))
        wall_s = (pd.Timestamp(finished) - pd.Timestamp(started)).total_seconds()
        calls = ok.assign(call_s=ok.time_us * _calls(ok) / 1e6).groupby(["round", "group_id"]).call_s.sum()
        rounds = ok["round"].nunique()
        round_s = max(0.0, (wall_s - start_s - float(calls.groupby(level=0).max().sum())) / max(rounds, 1))
        load = ok.load_per_cpu.dropna() if "load_per_cpu" in ok else pd.Series(dtype=float)
        return cls(latency, busbw, round_s, start_s or fallback.start_s,
                   f"rates of run {manifest.get('run_id')} on these hosts",
                   float(load.median()) if len(load) else None)

    def at_load(self, factor: float, said: str) -> Rates:
        """These rates on a host `factor` times as contended for CPU as when they were learned (CPU
        ranks: every call and round that much slower, or faster below 1), the basis saying so."""
        return dataclasses.replace(
            self, latency_us={k: v * factor for k, v in self.latency_us.items()},
            busbw_gbps={k: v / factor for k, v in self.busbw_gbps.items()}, round_s=self.round_s * factor,
            basis=f"{self.basis}; {said}")


BUSY_SAID = 1.1  # a correction within this factor either way is the reading's noise: none is made


def busy_factor(then_load_per_cpu: float | None, other_busy_cpus: float | None, ranks: int, cpus: int) -> float:
    """How much slower CPU ranks will run than when their rates were learned: each rank wants a CPU,
    so the host's demand per CPU is its ranks plus the work other processes hold now, against the
    learning run's (its rows' load per CPU, its ranks included; a quiet host holding only its
    ranks where the rates are defaults). Above one CPU's worth per CPU, a rank gets a share."""
    if other_busy_cpus is None or cpus < 1:
        return 1.0
    now = (ranks + other_busy_cpus) / cpus
    then = then_load_per_cpu if then_load_per_cpu is not None else ranks / cpus
    return max(1.0, now) / max(1.0, then)


def _where(topology: str) -> str:
    return "intra" if topology == "intra" else "inter"


def timed_passes(backend: str) -> int:
    """How often the harness runs the timed iterations: once on a host clock (gloo), twice on a GPU
    (each call between events, then the batch: workloads/harness.py)."""
    return 1 if backend == "gloo" else 2


def _calls(rows: pd.DataFrame) -> pd.Series:
    """Calls a row's measurement made: warm-up, the timed passes, checks (the spec's, where the rows lack them)."""
    def col(name: str, default: int) -> pd.Series:
        return rows[name].fillna(default) if name in rows else pd.Series(default, index=rows.index)
    passes = rows.backend.map(timed_passes) if "backend" in rows else 2
    return col("warmup", 5) + passes * col("iters", 20) + col("check_iters", 1)


DEFAULTS = {
    # gloo on CPU ranks: what the default sweep measured on this project's 2-core machines (all_reduce
    # 16M about 1.1 GB/s inside a node, 16 bytes about 400 us; docs/PERFORMANCE.md, section 12), and a
    # 10-gigabit host network across nodes
    "gloo": Rates({"intra": 400.0, "inter": 500.0}, {"intra": 1.0, "inter": 0.5}, 1.5, 5.0,
                  "default rates for gloo on CPUs (1 GB/s inside a node, 0.5 across, 400-500 us a call, "
                  "1.5 s a round)"),
    # NCCL on current GPUs: NVLink and 400G InfiniBand, nccl-tests' usual figures (docs/guides/expected.md)
    "nccl": Rates({"intra": 15.0, "inter": 30.0}, {"intra": 300.0, "inter": 40.0}, 3.0, 30.0,
                  "default rates for NCCL (300 GB/s inside a node, 40 across, 15-30 us a call, 3 s a round)"),
}


@dataclass(frozen=True)
class Estimate:
    seconds: float
    basis: str
    cases_s: dict = field(default_factory=dict)  # group id -> each case's seconds, in the order it runs them

    def line(self) -> str:
        return f"estimate: about {duration(self.seconds)} ({self.basis})"


def duration(seconds: float) -> str:
    """12 s, 3 min 20 s, 2 h 05 min, 3.2 days: as a person reads a wait."""
    s = max(0, int(math.ceil(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    if s < 86400 * 2:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s / 86400:.1f} days"


def estimate(plan: Plan, spec: SweepSpec, inv: Inventory, rates: Rates, backend: str,
             done: frozenset[str] = frozenset()) -> Estimate:
    """The run's duration at `rates` on `backend`: start-up, then each round as long as its slowest
    group (the groups in `done`, already on disk where a run resumes, left out)."""
    passes = timed_passes(backend)
    firsts = inv.first_rank()
    cases: dict[int, list] = {}
    group_s: dict[tuple[int, str], tuple[float, ...]] = {}
    cases_s: dict[str, tuple[float, ...]] = {}
    total = rates.start_s
    for rnd in plan.rounds:
        left = [g for g in rnd if g.group_id not in done]
        if not left:
            continue
        slowest = 0.0
        for g in left:
            n = len(g.ranks)
            nodes = {bisect.bisect_right(firsts, r) - 1 for r in g.ranks}
            where = "intra" if len(nodes) == 1 else "inter"
            key = (n, where)
            if key not in group_s:
                mine = cases.setdefault(n, one_size_each(build_cases(spec, n)))  # as the runner runs them
                group_s[key] = tuple(_case_s(c, n, *rates.of(where, c.collective), passes) for c in mine)
            cases_s[g.group_id] = group_s[key]
            slowest = max(slowest, sum(group_s[key]))
        total += slowest + rates.round_s
    return Estimate(total, rates.basis, cases_s)


def _case_s(case, n: int, latency_us: float, busbw_gbps: float, passes: int) -> float:
    if case.replay is not None:
        return 0.0  # a replay's steps are priced by predict, not here
    factor = registry.collective_of(case.collective).busbw_factor(n)
    calls = case.warmup + passes * case.iters + case.check_iters
    return sum(calls * (latency_us / 1e6 + c * ELEMENT_BYTES[case.dtype] * factor / (busbw_gbps * 1e9))
               for c in case.counts)
