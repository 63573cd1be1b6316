"""What a watch cycle decides, without Ray: busy nodes from what Ray has free, the suspects of a
cycle and the partners that tell them apart, alerts from a qualification, the partitions a
retention drops, durations, the JSON line of a cycle, its drift as compare concludes it, and the
Prometheus rules' series."""

import datetime as dt
import re
from pathlib import Path

import pytest
import yaml

from orchestrator.analysis.diagnosis import Flag
from orchestrator.errors import UsageError
from orchestrator.execution import canary
from orchestrator.operations import watch, watch_cycle
from orchestrator.sweep.inventory import from_ray_nodes
from tests.synthetic import write_cluster_run

RULES = Path(__file__).resolve().parents[2] / "docs" / "prometheus" / "collbench-alerts.yml"


def _node(i: int, gpus: int = 0) -> dict:
    return {"NodeID": f"id{i}", "NodeManagerAddress": f"10.0.0.{i}", "NodeManagerHostname": f"h{i}", "Alive": True,
            "Resources": {"CPU": 2.0, **({"GPU": float(gpus)} if gpus else {})}}


def test_a_node_another_job_holds_part_of_is_busy():
    cpu = from_ray_nodes([_node(1), _node(2), _node(3)], 2)
    free = {"id1": {"CPU": 2.0}, "id2": {"CPU": 1.0}}  # id2: a job holds one CPU; id3: Ray reports nothing free
    assert [n.ip for n in canary.busy_nodes(cpu, free, 1.0)] == ["10.0.0.2", "10.0.0.3"]
    assert canary.busy_nodes(cpu, free, 0.0) == []  # ranks that ask for nothing fit anywhere
    gpu = from_ray_nodes([_node(1, 8), _node(2, 8)], 2)
    assert [n.ip for n in canary.busy_nodes(gpu, {"id1": {"GPU": 8.0}, "id2": {"GPU": 7.0, "CPU": 2.0}}, 1.0)] == \
        ["10.0.0.2"]  # one GPU held: the node's ranks cannot all run


def test_suspects_and_the_partners_that_tell_them_apart():
    flag = Flag("slow_pair", ["10.0.0.5", "10.0.0.6"], [], "all_reduce", 1 << 20, 0.1, 0.4, "slow")
    assert canary.suspects(["10.0.0.1:0,10.0.0.2:0"], [flag]) == {"10.0.0.1", "10.0.0.2", "10.0.0.5", "10.0.0.6"}
    checked = [f"10.0.0.{i}" for i in range(1, 9)]
    assert canary.with_partners(checked, {"10.0.0.3"}) == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]  # three to judge
    assert canary.with_partners(checked, {"10.0.0.2", "10.0.0.7"}) == ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.7"]
    assert canary.with_partners(checked[:3], set(checked[:3])) == checked[:3]  # nobody left to partner: all
    # once qualify named 10.0.0.2, its link explains the drop: 10.0.0.1 is no longer doubted for it
    # (the partners of a slow node, doubted every cycle, would otherwise be alerted as intermittent)
    assert canary.suspects(["10.0.0.1:0,10.0.0.2:0"], [flag], {"10.0.0.2"}) == {"10.0.0.2", "10.0.0.5", "10.0.0.6"}
    pair_of_named = Flag("slow_pair", ["10.0.0.2", "10.0.0.3"], [], "all_reduce", 1 << 20, 0.1, 0.4, "slow")
    assert canary.suspects(["10.0.0.1:0,10.0.0.4:0"], [pair_of_named], {"10.0.0.2"}) == {"10.0.0.1", "10.0.0.2",
                                                                                        "10.0.0.4"}


def test_alerts_name_what_qualify_did_not_pass_with_the_evidence():
    from orchestrator.sweep.qualify_types import NodeVerdict, Outcome

    nodes = [
        NodeVerdict("10.0.0.1", "a", "n1", Outcome.PASS, "", ()),
        NodeVerdict("10.0.0.2", "b", "n2", Outcome.SLOW, "", (
            {"phase": "pairs", "status": "slow", "busbw_gbps": 0.011, "reference_gbps": 0.045, "detail": "4x below"},)),
        NodeVerdict("10.0.0.3", "c", "n3", Outcome.HANG, "", ({"phase": "pairs", "status": "hang"},)),
    ]
    alerts = canary.alerts_from(nodes, {"10.0.0.2": (0.012, 0.046, "all_reduce 4194304 B: -74% against its baseline")})
    assert [(a.node, a.kind, a.value, a.reference) for a in alerts] == [("10.0.0.2", "slow", 0.011, 0.045),
                                                                       ("10.0.0.3", "hang", None, None)]
    assert alerts[0].message == "10.0.0.2 (b) slow: 4x below; canary: all_reduce 4194304 B: -74% against its baseline"


def test_retention_drops_only_date_partitions_older_than_it():
    from orchestrator.results.retention import expired

    names = ["date=2026-11-01", "date=2026-11-24", "date=2026-11-25", "date=2026-12-01", "date=nope", "20261201T1-x",
             "_runs"]
    assert expired(names, dt.date(2026, 12, 1), 6) == ["date=2026-11-01", "date=2026-11-24"]


def test_dropping_expired_partitions_takes_their_runs_manifests_too(tmp_path):
    from orchestrator.results.retention import drop_expired

    for day, run in (("2026-11-01", "r-old"), ("2026-11-30", "r-new")):
        (tmp_path / f"date={day}" / run).mkdir(parents=True)
        (tmp_path / f"date={day}" / run / "part-0.parquet").write_bytes(b"x")
    (tmp_path / "_runs").mkdir()
    for run in ("r-old", "r-new", "r-other"):
        (tmp_path / "_runs" / f"{run}.json").write_text("{}")
    assert list(drop_expired(str(tmp_path), dt.date(2026, 12, 1), 6)) == [(f"{tmp_path}/date=2026-11-01", 1)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["_runs", "date=2026-11-30"]
    assert sorted(p.name for p in (tmp_path / "_runs").iterdir()) == ["r-new.json", "r-other.json"]


def test_durations():
    from orchestrator.operations.watch import MAX_DURATION_S
    from orchestrator.sweep.units import parse_duration

    assert [parse_duration(t, "--every", MAX_DURATION_S) for t in ("30s", "5m", "2h", "7d", "90")] == \
        [30, 300, 7200, 604800, 90]
    for bad in ("", "0", "-5m", "5x", "nan", "1e9d"):
        with pytest.raises(UsageError, match="--every"):
            parse_duration(bad, "--every", MAX_DURATION_S)


def test_a_cycle_is_one_json_object_with_the_issues_fields():
    cycle = watch.Cycle(3, dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc), ["10.0.0.1"], ["10.0.0.2"],
                        [canary.Alert("10.0.0.1", "slow", 0.01, 0.04, "slow")], "r1", "q1", 12.5)
    out = cycle.to_json()
    assert list(out)[:5] == ["cycle", "started_at", "nodes_checked", "nodes_busy", "alerts"]
    assert out["alerts"] == [{"node": "10.0.0.1", "kind": "slow", "value": 0.01, "reference": 0.04, "message": "slow",
                             "action": None, "drained": None}]
    assert cycle.line().startswith("collbench: watch cycle 3 at 2026-12-01T12:00:00Z: 1 node(s) checked, busy: ")


def test_the_alerting_rules_query_what_watch_exports():
    rules = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    from orchestrator.execution.metrics import WATCH_NAMES

    exported = {f"ray_{n}" + ("_total" if n == "collbench_alerts" else "") for n in WATCH_NAMES}
    used = {name for r in rules for name in re.findall(r"ray_collbench_\w+", r["expr"])}
    assert used and used <= exported
    assert {r["alert"] for r in rules} == {"CollbenchNodeDegraded", "CollbenchWatchStalled", "CollbenchNothingChecked"}
    assert all({"summary", "description"} <= set(r["annotations"]) for r in rules)


def test_nodes_too_small_for_their_ranks_are_said_not_called_busy():
    """Issue 32: 4 lab nodes of 1 CPU each, the default 2 CPU ranks a node: every cycle read 'every
    node is busy' forever. Fitted (no --ranks-per-node), they measure with one rank each; with
    --ranks-per-node 2 each is named too small, with the fix."""
    from orchestrator.execution.canary import fit_cpu_ranks
    from orchestrator.sweep.inventory import Inventory, Node

    inv = Inventory([Node(f"id{i}", f"10.0.0.{i}", f"h{i}", 0, 2) for i in range(1, 5)])
    one_cpu = {f"id{i}": {"CPU": 1.0} for i in range(1, 5)}
    assert fit_cpu_ranks(inv, one_cpu, 1.0, 2, fit=True) == (1, {})
    ranks, small = fit_cpu_ranks(inv, one_cpu, 1.0, 2, fit=False)
    assert ranks == 2 and sorted(small) == ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]
    assert small["10.0.0.1"] == ("too small for 2 rank(s) (has 1 CPU(s) for them): give it more CPUs (ray start "
                                 "--num-cpus) or run watch with --ranks-per-node 1")
    # big enough nodes keep what was asked; a node with no CPU at all is too small even when fitting
    mixed = {"id1": {"CPU": 8.0}, "id2": {"CPU": 4.0}, "id3": {"CPU": 0.0}, "id4": {"CPU": 3.0}}
    ranks, small = fit_cpu_ranks(inv, mixed, 1.0, 2, fit=True)
    assert ranks == 2 and list(small) == ["10.0.0.3"]
    gpus = Inventory([Node("g1", "10.0.1.1", "g", 8, 8)])
    assert fit_cpu_ranks(gpus, {"g1": {"CPU": 1.0, "GPU": 8.0}}, 1.0, 2, fit=False) == (2, {})


def test_a_watch_blind_for_three_cycles_in_a_row_raises_an_alert():
    from orchestrator.execution.canary import BLIND_CYCLES, blind_alert

    at = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)
    measured = watch.Cycle(1, at, ["10.0.0.1"], run_id="r1")
    blind = [watch.Cycle(i, at, note="every node is busy: nothing measured this cycle") for i in range(2, 5)]
    assert BLIND_CYCLES == 3
    assert blind_alert([measured, *blind[:2]], BLIND_CYCLES) is None  # one of the last three measured
    alert = blind_alert([measured, *blind], BLIND_CYCLES)
    assert (alert.node, alert.kind) == ("*", "blind")
    assert alert.message == ("watch measured nothing in the last 3 cycles (every node is busy: nothing measured this "
                             "cycle)")
    assert blind_alert(blind[:2], BLIND_CYCLES) is None  # too few cycles yet


def test_a_node_doubted_in_several_cycles_and_cleared_each_time_is_intermittent():
    """Issue 42: a flapping NIC drifts in one cycle, passes qualify, drifts again two cycles later:
    each cycle alone clears it; the second doubt in FLAP_WINDOW measured cycles names it."""
    from orchestrator.execution.canary import FLAP_CYCLES, FLAP_WINDOW, Alert, flapping_alerts

    at = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)

    def cycle(n: int, doubted=(), alerts=()) -> watch.Cycle:
        return watch.Cycle(n, at, ["10.0.0.1", "10.0.0.2"], run_id=f"r{n}", doubted=list(doubted),
                           alerts=list(alerts))

    assert (FLAP_CYCLES, FLAP_WINDOW) == (2, 6)
    once = [cycle(1), cycle(2, ["10.0.0.2"])]
    assert flapping_alerts(once) == []
    twice = [*once, cycle(3), cycle(4, ["10.0.0.2"])]
    (alert,) = flapping_alerts(twice)
    assert (alert.node, alert.kind) == ("10.0.0.2", "intermittent")
    assert alert.message == ("10.0.0.2 intermittent: doubted in 2 of the last 4 measured cycles (cycles 2, 4: a "
                             "drift beyond noise or a flag), and cleared by qualify each time")
    assert flapping_alerts([*twice, cycle(5)]) == []  # said in a cycle that doubts it, not every cycle after
    named = [cycle(1), cycle(2, ["10.0.0.2"], [Alert("10.0.0.2", "slow", 1.0, 2.0, "slow")]), cycle(3, ["10.0.0.2"])]
    assert flapping_alerts(named) == []  # already named: a slow node, not a flapping one
    old = [cycle(1, ["10.0.0.2"]), *(cycle(n) for n in range(2, 8)), cycle(8, ["10.0.0.2"])]
    assert flapping_alerts(old) == []  # the first doubt is out of the window


def test_drift_says_what_compare_concludes(tmp_path):
    """Watch's drift is compare's judgement of the cycle against its rolling baseline: one baseline
    cycle of two nodes measuring one size leaves only the prior to judge, so a 2x drop is no
    suspect and the cycle says "drift inconclusive: run the baseline again"; a 10x drop is beyond
    any plausible noise (a suspect, and "dropped")."""
    out = str(tmp_path / "results")
    for run_id, factor in (("c1", 1.0), ("c2", 0.5), ("c3", 0.1)):
        write_cluster_run(out, run_id, nodes=2, ranks_per_node=2, patterns=("intra",), noise=0.01,
                          sizes=[16 << 20], faults=(("node_intra", 1, factor),), backend="gloo")
    drops, evidence, drift = watch_cycle.drift(out, ["c1"], "c2", 0.05)
    assert drops == [] and evidence == {} and drift.startswith("inconclusive: run the baseline again")
    cycle = watch.Cycle(2, dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc), ["10.0.0.10"], drift=drift)
    assert "; drift inconclusive: run the baseline again" in cycle.line()
    assert cycle.to_json()["drift"] == drift
    drops, evidence, drift = watch_cycle.drift(out, ["c1"], "c3", 0.05)
    assert drops == ["10.0.0.11:0,10.0.0.11:1"] and drift.startswith("dropped: 1 of 2 row(s)")
    assert "10.0.0.11" in evidence
