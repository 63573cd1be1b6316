"""What a watch cycle judges with a switch tree and a scheduler (issues 44 and 46), without Ray: a
slow uplink is one alert naming the switch, and what crosses it doubts no node; each node a cycle
names with a verdict gets the scheduler's command that takes it out of service, run under --drain
once per node per watch, never for a switch, a drift or a blind watch. `scontrol` here is a
stand-in on PATH that records its arguments (the lab Slurm test runs the real one)."""

from __future__ import annotations

import datetime as dt
import os

import pytest

from orchestrator.analysis.diagnosis import Flag, FlagKind
from orchestrator.errors import UsageError
from orchestrator.execution import canary
from orchestrator.execution.canary import Alert, AlertKind, Cycle
from orchestrator.operations import watch_cycle
from orchestrator.operations.qualifying import Qualification
from orchestrator.operations.watch import WatchOptions, watch
from orchestrator.results.schema import RunState
from orchestrator.scheduler import Scheduler
from orchestrator.sweep.inventory import Node
from orchestrator.sweep.qualify_types import NodeVerdict, Outcome
from orchestrator.sweep.spec import SweepSpec
from orchestrator.sweep.topology import parse_conf
from tests.helpers import stand_in

LEAF0, LEAF1 = ["10.0.0.1", "10.0.0.2", "10.0.0.3"], ["10.0.0.4", "10.0.0.5", "10.0.0.6"]
TREE = parse_conf("SwitchName=leaf0 Nodes=h[1-3]\nSwitchName=leaf1 Nodes=h[4-6]\nSwitchName=spine Switches=leaf[0-1]\n",
                  "topology.conf")


def _nodes(n: int = 7) -> list[Node]:
    return [Node(f"id{i}", f"10.0.0.{i}", f"h{i}", 0, 1) for i in range(1, n + 1)]


def _uplink_flag(switches: list[str], nodes: list[str]) -> Flag:
    return Flag(FlagKind.SLOW_UPLINK, nodes, [], "all_reduce", 8 << 20, 0.01, 0.04, "slow uplink leaf1: its 9 pairs",
                extra={"switches": switches, "slow_pairs": 9, "pairs": 9})


def test_a_slow_uplink_is_one_alert_naming_the_switch_and_what_crosses_it_doubts_no_node():
    leaf_of, unplaced = watch_cycle.leaves(TREE, _nodes())
    assert leaf_of == {**dict.fromkeys(LEAF0, "leaf0"), **dict.fromkeys(LEAF1, "leaf1")}
    assert [n.ip for n in unplaced] == ["10.0.0.7"]  # judged without a leaf
    with pytest.raises(UsageError, match=r"--topology topology.conf: node h7, 10.0.0.7 is under no switch of it"):
        watch_cycle.leaves(TREE, _nodes(), strict=True)
    assert watch_cycle.leaves(None, _nodes()) == ({}, [])

    flag = _uplink_flag(["leaf1"], LEAF1)
    found = {"switches": ["leaf1"], "detail": "the uplink of leaf1: ...", "nodes": LEAF1, "busbw_gbps": 0.01}
    alerts = watch_cycle.uplink_alerts([flag, found])  # the report's and the qualification's: one alert
    assert [(a.node, a.kind, a.value, a.reference) for a in alerts] == [("leaf1", "slow_uplink", 0.01, 0.04)]
    assert alerts[0].message.startswith("slow_uplink leaf1: slow uplink leaf1: its 9 pairs; none of its 3 node(s)")
    below = watch_cycle.below(alerts, leaf_of)
    assert below == [set(LEAF1)]

    across = "10.0.0.1:0,10.0.0.5:0"  # a drop across leaf1's uplink: its evidence
    inside = "10.0.0.4:0,10.0.0.5:0"  # a drop inside leaf1: a node's
    slow_pair = Flag(FlagKind.SLOW_PAIR, ["10.0.0.2", "10.0.0.3"], [], "all_reduce", 1 << 20, 0.1, 0.4, "slow")
    assert canary.suspects([across, inside], [flag, slow_pair], uplinks=below) == {"10.0.0.2", "10.0.0.3", "10.0.0.4",
                                                                                    "10.0.0.5"}
    assert canary.suspects([across], [flag]) == {"10.0.0.1", "10.0.0.5"}  # no uplink known: its flag is no suspect
    # two leaves' path ("leaf0,leaf1"): a set per leaf, so a pair across them is its evidence
    path = watch_cycle.below([Alert("leaf0,leaf1", AlertKind.SLOW_UPLINK, None, None, "")], leaf_of)
    assert path == [set(LEAF0), set(LEAF1)] and canary.suspects([across], [], uplinks=path) == set()
    # a spine above leaves: every node below it, through its leaves
    spine = watch_cycle.below([Alert("spine", AlertKind.SLOW_UPLINK, None, None, "")], leaf_of, TREE.parent_of())
    assert spine == [set(LEAF0 + LEAF1)]


def _cycle(alerts: list[Alert], n: int = 1) -> Cycle:
    return Cycle(n, dt.datetime(2026, 12, 5, tzinfo=dt.timezone.utc), LEAF0 + LEAF1, alerts=alerts, run_id="W1",
                 qualify_run_id=f"Q{n}")


def test_a_named_node_gets_the_schedulers_command_and_drain_runs_it_once_per_watch(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", stand_in(tmp_path, "scontrol") + os.pathsep + os.environ["PATH"])
    found = Qualification("Q1", RunState.FINISHED, 1, nodes=[
        NodeVerdict("10.0.0.2", "h-slm2", "id2", Outcome.SLOW, "", (), "slm2"),
        NodeVerdict("10.0.0.3", "h-slm3", "id3", Outcome.PASS, "", (), None)])
    names = watch_cycle.scheduler_names(found, Scheduler.SLURM)
    assert names == {"10.0.0.2": "slm2", "10.0.0.3": "h-slm3"}  # Slurm's name, else the host's
    assert watch_cycle.scheduler_names(found, Scheduler.KUBERNETES) == {"10.0.0.2": "slm2"}  # a host is a pod's
    names["10.0.0.5"] = "slm5"
    alerts = [Alert("10.0.0.2", AlertKind.SLOW, 0.01, 0.04, "10.0.0.2 (h-slm2) slow: 4x below its peers"),
              Alert("leaf1", AlertKind.SLOW_UPLINK, None, None, "slow_uplink leaf1: ..."),
              Alert("10.0.0.5", AlertKind.DRIFT, None, None, "10.0.0.5: dropped"),
              Alert("*", AlertKind.BLIND, None, None, "blind")]
    drained: dict = {}
    first = _cycle(alerts)
    lines = watch_cycle.take_out(first, names, Scheduler.SLURM, True, drained)
    assert lines == ["collbench: drained slm2 (slurm): scontrol update NodeName=slm2 State=DRAIN "
                     "'Reason=collbench: slow, 4x below its peers, run Q1'"]
    assert list(first.actions) == ["10.0.0.2"] and list(drained) == ["10.0.0.2"]  # never the switch, drift, blind
    shown = first.to_json()["alerts"]
    assert shown[0]["action"]["commands"] == ["scontrol update NodeName=slm2 State=DRAIN "
                                              "'Reason=collbench: slow, 4x below its peers, run Q1'"]
    assert shown[0]["drained"] == {"ok": True, "said": ""}
    assert [a["action"] for a in shown[1:]] == [None, None, None]

    second = _cycle(alerts[:1], 2)  # named again: the command shown, not run again
    assert watch_cycle.take_out(second, names, Scheduler.SLURM, True, drained) == []
    assert second.to_json()["alerts"][0]["action"] is not None and second.to_json()["alerts"][0]["drained"] is None
    calls = (tmp_path / "calls").read_text().split("---\n")[:-1]
    assert len(calls) == 1 and "NodeName=slm2" in calls[0]

    printed = _cycle(alerts[:1])  # without --drain: the command, said, and nothing run
    assert watch_cycle.take_out(printed, names, Scheduler.SLURM, False, {}) == [
        "collbench: to take slm2 out of service: scontrol update NodeName=slm2 State=DRAIN "
        "'Reason=collbench: slow, 4x below its peers, run Q1'"]
    assert len((tmp_path / "calls").read_text().split("---\n")) - 1 == 1
    assert watch_cycle.take_out(_cycle(alerts[:1]), names, Scheduler.NONE, False, {}) == []  # no scheduler


def test_watch_refuses_drain_without_a_scheduler_and_a_bad_tree_before_writing(tmp_path, monkeypatch):
    for var in ("SLURM_JOB_ID", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(var, raising=False)
    out = tmp_path / "results"
    spec = SweepSpec(output=str(out))
    with pytest.raises(UsageError, match="--scheduler nobody: choose from auto, slurm, kubernetes, none"):
        WatchOptions(sweep=spec, scheduler="nobody")
    with pytest.raises(UsageError, match="--drain: no scheduler to drain in"):
        watch(WatchOptions(sweep=spec, drain=True), emit=print, say=print)
    bad = tmp_path / "topology.conf"
    bad.write_text("SwitchName=leaf0 Nodes=h[3-1]\n")
    with pytest.raises(UsageError, match="topology.conf:1: 'h\\[3-1\\]': not a Slurm host list"):
        watch(WatchOptions(sweep=spec, topology=str(bad)), emit=print, say=print)
    assert not out.exists()  # nothing written
