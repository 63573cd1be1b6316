"""How long a run will take, said before it starts (issue 45): the estimate is the sum of its
rounds at stated rates (exact, by hand), rates learned from an earlier run give back that run's
own wall time, and only a finished run of the same backend on the same nodes teaches them."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time

import pytest

from orchestrator.results import dataset
from orchestrator.results.history import earlier_rates
from orchestrator.results.store import ResultStore
from orchestrator.sweep.estimate import DEFAULTS, Rates, busy_factor, duration, estimate
from orchestrator.sweep.inventory import from_description
from orchestrator.sweep.planner import make_plan
from orchestrator.sweep.spec import SweepSpec
from tests.synthetic import SIZES, write_cluster_run
from workloads.contention import busy_cpus

STARTED = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.timezone.utc)


def test_durations_read_as_a_person_reads_a_wait():
    assert [duration(s) for s in (0.2, 59, 60, 200, 3599, 3600, 7500, 86400 * 3)] == [
        "1 s", "59 s", "1 min 00 s", "3 min 20 s", "59 min 59 s", "1 h 00 min", "2 h 05 min", "3.0 days"]


def test_an_estimate_is_its_start_then_each_round_as_long_as_its_slowest_group():
    spec = SweepSpec(collectives=("all_reduce",), min_bytes=1 << 20, max_bytes=1 << 20, iters=10, warmup=2,
                     check_iters=1, patterns=("intra", "inter"))
    inv = from_description("2x2cpu")
    plan = make_plan(spec, inv)
    rates = Rates({"intra": 100.0, "inter": 400.0}, {"intra": 1.0, "inter": 0.25}, 2.0, 5.0, "by hand")
    # all_reduce's bus factor 2(n-1)/n: 1 for two ranks; on NCCL 2 + 2 x 10 + 1 calls per size (the
    # timed iterations twice: each call, then the batch), on gloo 2 + 10 + 1 (one pass on a host clock)
    intra = 23 * (100e-6 + (1 << 20) * 1.0 / 1e9)
    inter = 23 * (400e-6 + (1 << 20) * 1.0 / 0.25e9)
    rounds = [[(g.pattern, g.ranks) for g in rnd] for rnd in plan.rounds]
    # the two nodes alone side by side, then each local rank with its peer on the other node
    assert rounds == [[("intra", (0, 1)), ("intra", (2, 3))], [("inter", (0, 2)), ("inter", (1, 3))]]
    got = estimate(plan, spec, inv, rates, "nccl")
    assert got.seconds == pytest.approx(5.0 + (intra + 2.0) + (inter + 2.0), rel=1e-12)
    assert got.line() == f"estimate: about {duration(got.seconds)} (by hand)"
    gloo = estimate(plan, spec, inv, rates, "gloo").seconds
    assert gloo == pytest.approx(5.0 + (intra * 13 / 23 + 2.0) + (inter * 13 / 23 + 2.0), rel=1e-12)
    # resumed with the first round on disk: only the second
    done = frozenset(g.group_id for g in plan.rounds[0])
    assert estimate(plan, spec, inv, rates, "nccl", done).seconds == pytest.approx(5.0 + inter + 2.0, rel=1e-12)


def _earlier_run(out: str, run_id: str, *, start_s: float, round_s: float, minute: int = 0, backend: str = "gloo",
                 state: str = "finished", ips: list[str] | None = None) -> float:
    """A stored run of 2 nodes x 2 ranks (intra, then inter) whose manifest's wall time is its
    start-up, each round's slowest group's calls, and `round_s` a round beyond them; that wall time."""
    write_cluster_run(out, run_id, nodes=2, ranks_per_node=2, patterns=("intra", "inter"), intra_gbps=4.0,
                      inter_gbps=1.0, alpha_us=50.0, minute=minute, backend=backend)
    rows = dataset.load(out, run_id)
    calls = rows.time_us * (rows.warmup + (1 if backend == "gloo" else 2) * rows.iters + rows.check_iters) / 1e6
    per_group = rows.assign(call_s=calls).groupby(["round", "group_id"]).call_s.sum()
    rounds = per_group.groupby(level=0).max()
    wall = start_s + float(rounds.sum()) + round_s * len(rounds)
    started = STARTED + dt.timedelta(minutes=minute)
    ResultStore(out, run_id).write_manifest({
        "command": "run", "state": state, "backend": backend, "started_at": started,
        "finished_at": started + dt.timedelta(seconds=wall), "startup_connect_s": start_s / 2,
        "startup_workers_s": start_s / 2,
        "inventory": json.dumps([{"ip": ip} for ip in (ips or ["10.0.0.10", "10.0.0.11"])])})
    return wall


def test_rates_learned_from_an_earlier_run_give_back_its_own_wall_time(tmp_path):
    out = str(tmp_path / "results")
    wall = _earlier_run(out, "r", start_s=6.0, round_s=1.25)
    rates = earlier_rates(out, "gloo", ["10.0.0.11", "10.0.0.10"])
    assert rates.basis == "rates of run r on these hosts"
    assert rates.start_s == pytest.approx(6.0) and rates.round_s == pytest.approx(1.25)
    rows = dataset.load(out, "r")
    largest = rows[rows.msg_bytes == rows.msg_bytes.max()]
    assert rates.busbw_gbps["intra"] == pytest.approx(largest[largest.topology == "intra"].busbw_gbps.median())
    assert rates.busbw_gbps["inter"] == pytest.approx(largest[largest.topology == "inter"].busbw_gbps.median())
    # the same sweep planned again, at those rates: the run's own wall time, within what a two-point
    # rate (latency at the smallest size, bus bandwidth at the largest) makes of the sizes between
    spec = SweepSpec(collectives=("all_reduce",), min_bytes=SIZES[0], max_bytes=SIZES[-1], step_factor=4,
                     patterns=("intra", "inter"), iters=20, warmup=5, check_iters=1)
    inv = from_description("2x2")
    got = estimate(make_plan(spec, inv), spec, inv, rates, "gloo").seconds
    assert got == pytest.approx(wall, rel=0.05), (got, wall)


def test_only_a_finished_run_of_the_same_backend_on_the_same_nodes_teaches_the_rates(tmp_path):
    out = str(tmp_path / "results")
    assert earlier_rates(out, "gloo", ["10.0.0.10"]) is DEFAULTS["gloo"]  # no dataset yet
    _earlier_run(out, "other-nodes", start_s=1.0, round_s=1.0, minute=1, ips=["10.0.0.10", "10.0.0.99"])
    _earlier_run(out, "nccl", start_s=1.0, round_s=1.0, minute=2, backend="nccl")
    _earlier_run(out, "stopped", start_s=1.0, round_s=1.0, minute=3, state="interrupted")
    ips = ["10.0.0.10", "10.0.0.11"]
    assert earlier_rates(out, "gloo", ips) is DEFAULTS["gloo"]
    assert earlier_rates(out, "nccl", ips).basis == "rates of run nccl on these hosts"
    _earlier_run(out, "good", start_s=1.0, round_s=1.0, minute=4)
    assert earlier_rates(out, "gloo", ips).basis == "rates of run good on these hosts"


def test_cpu_ranks_on_a_busier_host_are_estimated_at_the_share_of_cpus_left_them():
    """Each CPU rank wants a CPU: the host's demand per CPU is its ranks plus what other work holds
    now, against the demand the rates were learned at; above one per CPU a rank gets a share."""
    # 2 ranks on 2 CPUs, one CPU held by a busy loop: 3 wanted of 2, learned on a quiet host (1 per CPU)
    assert busy_factor(1.0, 1.0, ranks=2, cpus=2) == pytest.approx(1.5)
    assert busy_factor(None, 1.0, ranks=2, cpus=2) == pytest.approx(1.5)  # defaults: a quiet host assumed
    assert busy_factor(1.0, 0.0, ranks=2, cpus=2) == 1.0
    assert busy_factor(1.0, 0.5, ranks=1, cpus=4) == 1.0  # spare CPUs: nobody waits
    assert busy_factor(2.0, 0.0, ranks=2, cpus=2) == pytest.approx(0.5)  # learned on a host twice as busy
    assert busy_factor(1.0, None, ranks=2, cpus=2) == 1.0  # no /proc/stat: nothing known, nothing changed
    spec = SweepSpec(collectives=("all_reduce",), min_bytes=1 << 20, max_bytes=1 << 20, iters=10, warmup=2,
                     check_iters=1, patterns=("intra", "inter"))
    inv = from_description("2x2cpu")
    plan = make_plan(spec, inv)
    rates = Rates({"intra": 100.0, "inter": 400.0}, {"intra": 1.0, "inter": 0.25}, 2.0, 5.0, "by hand")
    busy = rates.at_load(1.5, "x1.5 for this host's load now")
    assert busy.basis == "by hand; x1.5 for this host's load now"
    quiet_s, busy_s = (estimate(plan, spec, inv, r, "gloo").seconds for r in (rates, busy))
    assert busy_s - 5.0 == pytest.approx(1.5 * (quiet_s - 5.0), rel=1e-12)  # all but the start-up


def test_the_rates_keep_the_load_their_run_measured_at_and_the_host_load_is_read(tmp_path):
    out = str(tmp_path / "results")
    _earlier_run(out, "r", start_s=6.0, round_s=1.25)
    assert earlier_rates(out, "gloo", ["10.0.0.10", "10.0.0.11"]).load_per_cpu is None  # rows without it
    rows = dataset.load(out, "r")
    loads = [0.5, 1.0, 1.5, None] * (len(rows) // 4) + [1.0] * (len(rows) % 4)
    manifest = dataset.manifest(out, "r") | {"run_id": "r"}
    assert Rates.learned(rows.assign(load_per_cpu=loads), manifest, DEFAULTS["gloo"]).load_per_cpu == 1.0
    # a busy loop of this test's own holds most of a CPU while the host is read (a wide bound: other
    # tests share this host, so at least it, never less)
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        assert busy_cpus(0.3) >= 0.5
    finally:
        spinner.kill()
        spinner.wait()
