"""The scheduler a run lives under (issue 44): found from the driver's environment, the job it
records in the manifest, and for each node that did not pass the command that takes it out of
service, run under --drain. `scontrol` and `kubectl` here are stand-ins on PATH that record their
arguments and answer as told (a real Slurm cluster is the lab test's, not built yet)."""

from __future__ import annotations

import os
import subprocess

import pytest

from orchestrator import scheduler
from orchestrator.operations.qualify import out_of_service
from orchestrator.operations.qualifying import Qualification
from orchestrator.results.schema import RunState
from orchestrator.scheduler import Scheduler
from orchestrator.sweep.qualify_types import NodeVerdict, Outcome
from tests.helpers import run_main, stand_in

SLURM_ENV = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "qualify", "SLURM_JOB_PARTITION": "gpu",
             "SLURM_CLUSTER_NAME": "lab", "SLURM_JOB_NODELIST": "slm[1-3]", "SLURM_JOB_NUM_NODES": "3"}


def test_the_scheduler_and_its_job_are_read_from_the_environment():
    assert Scheduler.detect(SLURM_ENV) is Scheduler.SLURM
    assert scheduler.job(SLURM_ENV) == {"scheduler": "slurm", "job_id": "4242", "job_name": "qualify",
                                        "partition": "gpu", "cluster": "lab", "nodelist": "slm[1-3]", "nodes": "3"}
    pod = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "POD_NAMESPACE": "ml", "HOSTNAME": "collbench-abc"}
    assert Scheduler.detect(pod) is Scheduler.KUBERNETES
    assert scheduler.job(pod) == {"scheduler": "kubernetes", "namespace": "ml", "pod": "collbench-abc"}
    assert Scheduler.detect({}) is Scheduler.NONE and scheduler.job({}) is None
    assert scheduler.chosen("kubernetes", SLURM_ENV) is Scheduler.KUBERNETES  # named beats found


def test_the_commands_are_the_schedulers_own():
    act = scheduler.action(Scheduler.SLURM, "gpu-a17", "slow", "slow in 3 of 4 probes", "R1")
    assert act.commands == (("scontrol", "update", "NodeName=gpu-a17", "State=DRAIN",
                             "Reason=collbench: slow, slow in 3 of 4 probes, run R1"),)
    assert act.shown() == ["scontrol update NodeName=gpu-a17 State=DRAIN "
                           "'Reason=collbench: slow, slow in 3 of 4 probes, run R1'"]
    k8s = scheduler.action(Scheduler.KUBERNETES, "node-7", "hang", "hung in the gate", "R1")
    assert k8s.commands == (("kubectl", "cordon", "node-7"),
                            ("kubectl", "label", "node", "node-7", "collbench.io/verdict=hang", "--overwrite"))
    assert scheduler.action(Scheduler.NONE, "x", "slow", "", "R1") is None
    assert len(scheduler.reason("slow", "x" * 200, "R1")) == len("collbench: slow, , run R1") + 80


def _verdicts() -> Qualification:
    def v(ip, verdict, host, name):
        return NodeVerdict(ip, host, "id", verdict, f"{verdict.value} in 2 of 2 probes", (), name)

    return Qualification("R1", RunState.FINISHED, 1, nodes=[
        v("10.0.0.1", Outcome.PASS, "h-slm1", "slm1"), v("10.0.0.2", Outcome.SLOW, "h-slm2", "slm2"),
        v("10.0.0.3", Outcome.LOST, "h-slm3", None)])


def test_drain_runs_for_every_node_that_did_not_pass_and_no_other(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", stand_in(tmp_path, "scontrol") + os.pathsep + os.environ["PATH"])
    result = out_of_service(_verdicts(), Scheduler.SLURM, drain=True)
    assert sorted(result.actions) == ["10.0.0.2", "10.0.0.3"]  # the lost node by its host name
    assert [d.ok for d in result.drained.values()] == [True, True]
    calls = [c.splitlines() for c in (tmp_path / "calls").read_text().split("---\n")[:-1]]
    assert calls == [["update", "NodeName=slm2", "State=DRAIN", "Reason=collbench: slow, slow in 2 of 2 probes, run R1"],
                     ["update", "NodeName=h-slm3", "State=DRAIN", "Reason=collbench: lost, lost in 2 of 2 probes, run R1"]]
    assert result.drained["10.0.0.2"].line() == (
        "collbench: drained slm2 (slurm): scontrol update NodeName=slm2 State=DRAIN "
        "'Reason=collbench: slow, slow in 2 of 2 probes, run R1'")
    printed = out_of_service(_verdicts(), Scheduler.SLURM, drain=False)
    assert sorted(printed.actions) == ["10.0.0.2", "10.0.0.3"] and printed.drained == {}
    assert len((tmp_path / "calls").read_text().split("---\n")) - 1 == 2  # printing runs nothing


def test_a_drain_the_scheduler_refuses_is_said_with_its_answer(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", stand_in(tmp_path, "kubectl", 1, 'Error from server (Forbidden): nodes "slm2" '
                                         'is forbidden') + os.pathsep + os.environ["PATH"])
    result = out_of_service(_verdicts(), Scheduler.KUBERNETES, drain=True)
    done = result.drained["10.0.0.2"]
    assert not done.ok and done.line() == ('collbench: could not drain slm2 (kubernetes): kubectl cordon slm2: exit 1: '
                                           'Error from server (Forbidden): nodes "slm2" is forbidden; a user allowed '
                                           'to patch nodes can run: kubectl cordon slm2; kubectl label node slm2 '
                                           'collbench.io/verdict=slow --overwrite')
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert scheduler.run(result.actions["10.0.0.2"]).said == "kubectl: not found on this machine's PATH"
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "kubectl").write_text("#!/bin/sh\n")  # there, but not executable
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert scheduler.run(result.actions["10.0.0.2"]).said == "kubectl: cannot start it (Permission denied)"
    # the node whose Kubernetes name is unknown gets no command: its host name is its pod's
    assert "10.0.0.3" not in result.actions


@pytest.mark.parametrize("args, line", [
    (["--drain", "--scheduler", "none"], "collbench: error: --drain: no scheduler to drain in (not inside a Slurm "
     "job or a Kubernetes pod); name it with --scheduler slurm or --scheduler kubernetes"),
    (["--scheduler", "pbs"], "collbench: error: argument --scheduler: invalid choice: 'pbs' (choose from 'auto', "
     "'slurm', 'kubernetes', 'none')"),
])
def test_qualify_refuses_a_drain_with_nothing_to_drain_in(tmp_path, monkeypatch, args, line):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    proc = run_main(["qualify", "--output", str(tmp_path / "out"), *args])
    assert (proc.returncode, proc.stdout, proc.stderr.splitlines()[-1]) == (2, "", line)
    assert not (tmp_path / "out").exists()


def test_the_heads_address_is_the_source_of_the_route_to_another_node():
    """Issue 58: the Slurm scripts' head address is what the kernel sends from toward another node of
    the job (here the only reachable one, loopback, reaches itself from loopback); a peer with no
    route or no name stops in one line; a one-node job takes the default route's source."""
    from orchestrator.errors import UsageError
    from orchestrator.scheduler import head_address

    assert head_address("127.0.0.1") == "127.0.0.1"
    assert head_address(None)  # the default route's source, or loopback where there is none
    with pytest.raises(UsageError, match=r"^head address: no route from this node to nosuchhost\.invalid \("):
        head_address("nosuchhost.invalid")


def test_a_node_whose_worker_gave_no_slurm_name_is_found_by_its_host_or_address():
    """Issue 58: Slurm refuses a host name where NodeName differs; the job's node list and
    `scontrol show node` say which NodeName a host or an address is (none where none is)."""
    from orchestrator.scheduler import slurm_name

    said = ("NodeName=gpu001 NodeAddr=10.1.0.5 NodeHostName=dgx-a01 State=MIXED\n"
            "NodeName=gpu002 NodeAddr=10.1.0.6 NodeHostName=dgx-a02 State=MIXED\n")

    def scontrol(argv, **kwargs):
        assert argv == ["scontrol", "show", "node", "-o", "gpu[001-002]"]
        return subprocess.CompletedProcess(argv, 0, said, "")

    env = {"SLURM_JOB_NODELIST": "gpu[001-002]"}
    assert slurm_name("dgx-a02.cluster.local", "", env, scontrol) == "gpu002"  # its short host name
    assert slurm_name("elsewhere", "10.1.0.5", env, scontrol) == "gpu001"  # its address
    assert slurm_name("elsewhere", "10.9.9.9", env, scontrol) is None
    assert slurm_name("dgx-a01", "", {}, scontrol) is None  # outside a Slurm job: nothing to look up


def test_qualify_as_junit_has_a_case_per_node_failures_for_the_named():
    """Issue 57: qualify's verdicts in the form CI systems read: a case per node, a failure for each
    node that did not pass (with its evidence), a skip for a node a stopped qualification left open."""
    from xml.etree import ElementTree as ET

    from orchestrator.commands.qualify import junit_cases
    from orchestrator.commands.render import render_junit

    result = _verdicts()
    result.unsettled = ["10.0.0.4"]
    suite = ET.fromstring(render_junit("collbench qualify", junit_cases(result)).split("\n", 1)[1]).find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("4", "2", "1")
    cases = {c.get("classname"): c for c in suite.iter("testcase")}
    assert sorted(cases) == ["10.0.0.4", "h-slm1 (slm1) (10.0.0.1)", "h-slm2 (slm2) (10.0.0.2)", "h-slm3 (10.0.0.3)"]
    assert cases["h-slm2 (slm2) (10.0.0.2)"].find("failure").get("message").startswith("slow: slow in 2 of 2 probes")
    assert cases["h-slm1 (slm1) (10.0.0.1)"].find("failure") is None and cases["10.0.0.4"].find("skipped") is not None
