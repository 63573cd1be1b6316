"""The operations' options check themselves, so the command line and the Python API refuse the
same values with the same line (api.report took any min_fraction before; the CLI refused it)."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from orchestrator import api
from orchestrator.errors import UsageError
from orchestrator.operations.compare import CompareOptions
from orchestrator.operations.qualify import DEFAULTS, Qualification, QualifyOptions, check_spec, qualify_spec
from orchestrator.operations.report import ReportOptions
from orchestrator.results.schema import RunState
from orchestrator.sweep.spec import SweepSpec
from tests.helpers import run_main


@pytest.mark.parametrize("bad, said", [
    ({"min_fraction": 0.0}, "--min-fraction 0: must be above 0 and at most 1"),
    ({"min_fraction": 1.5}, "--min-fraction 1.5: must be above 0 and at most 1"),
    ({"min_fraction": float("nan")}, "--min-fraction nan: must be above 0"),
    ({"threshold": 5.0}, "--threshold 5: must be a fraction below 1"),
    ({"unit": "bps"}, "--unit 'bps': one of GBps, Gbps"),
])
def test_report_options_refuse_a_bad_value_and_the_api_with_them(tmp_path, bad, said):
    with pytest.raises(UsageError, match="^" + said.replace("(", r"\(")):
        ReportOptions(path=str(tmp_path), **bad)
    with pytest.raises(UsageError, match="^" + said.replace("(", r"\(")):  # before the dataset is read
        api.report(str(tmp_path / "nothing here"), **bad)


def test_the_command_line_refuses_what_the_api_refuses(tmp_path):
    done = run_main(["report", str(tmp_path), "--min-fraction", "0"])
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "collbench: error: --min-fraction 0: must be above 0 and at most 1 (0.8: 80% of expected)\n"


def test_compare_and_qualify_options_check_themselves(tmp_path):
    with pytest.raises(UsageError, match=r"^--by 'links': link or shape"):
        CompareOptions(baseline="a", new="a", by="links")
    with pytest.raises(UsageError, match=r"^--by 'links': link or shape"):
        api.compare(str(tmp_path), by="links")
    with pytest.raises(UsageError, match=r"^--threshold 0: must be a fraction above 0"):
        QualifyOptions(threshold=0.0)
    with pytest.raises(UsageError, match=r"^--min-fraction 2: must be above 0 and at most 1"):
        api.qualify(min_fraction=2.0)


def test_qualify_measures_one_collective_and_one_dtype_from_either_face():
    assert check_spec(SweepSpec(**DEFAULTS)).collectives == ("all_reduce",)
    with pytest.raises(UsageError, match=r"^--collective all_reduce,broadcast: qualify measures one"):
        check_spec(SweepSpec(collectives=("all_reduce", "broadcast")))
    with pytest.raises(UsageError, match=r"^--dtype all: qualify measures one"):
        api.qualify(dtypes=["all"])


def test_qualify_measures_the_callers_sweep_and_refuses_what_the_command_line_refuses(monkeypatch):
    """Issue 43: api.qualify laid qualify's defaults over a caller's own sweep (all_reduce up to
    16 MiB with 5 iterations for an all_gather 1-4 MiB sweep of 7), and took `patterns`, which
    `collbench qualify --patterns pairwise` refuses (exit 2). Both before any Ray is touched."""
    mib = 1 << 20
    own = SweepSpec(collectives=("all_gather",), min_bytes=mib, max_bytes=4 * mib, iters=7)
    chosen = qualify_spec(own, {"ranks_per_node": 2})
    assert (chosen.collectives, chosen.min_bytes, chosen.max_bytes, chosen.iters, chosen.ranks_per_node) == \
        (("all_gather",), mib, 4 * mib, 7, 2)
    bare = qualify_spec(None, {"max_bytes": "4M"})  # without a sweep: qualify's defaults under the options
    assert (bare.collectives, bare.min_bytes, bare.max_bytes, bare.iters, bare.group_timeout_s) == \
        (("all_reduce",), mib, 4 * mib, DEFAULTS["iters"], DEFAULTS["group_timeout_s"])
    seen = []

    def recorded(spec, **kw):  # what the qualification would measure; an unfinished one comes back
        seen.append(spec)
        return Qualification("r", RunState.FAILED, 1)

    monkeypatch.setattr("orchestrator.operations.qualify.qualification", recorded)
    api.qualify(own, ranks_per_node=2)
    assert seen == [qualify_spec(own, {"ranks_per_node": 2})]
    with pytest.raises(UsageError, match=r"^collbench.api: key 'patterns' is not an option of collbench qualify"):
        api.qualify(patterns=["pairwise"])
    with pytest.raises(UsageError, match=r"^collbench.api: patterns pairwise in the sweep given: not an "
                       r"option of collbench qualify"):
        api.qualify(SweepSpec(collectives=("all_reduce",), patterns=("pairwise",)))
    assert len(seen) == 1
    refused = run_main(["qualify", "--patterns", "pairwise"])
    assert refused.returncode == 2 and "--patterns" in refused.stderr


@pytest.mark.parametrize("argv, options", [
    (["--inventory", "64x8"], {"inventory": "64x8"}),
    (["--inventory", "4x2cpu", "--patterns", "pairwise", "--collectives", "all_reduce,broadcast", "-e", "1M"],
     {"inventory": "4x2cpu", "patterns": ["pairwise"], "collectives": ["all_reduce", "broadcast"], "max_bytes": "1M"}),
    (["--inventory", "36x4/18", "--patterns", "domain"], {"inventory": "36x4/18", "patterns": ["domain"]}),
])
def test_plan_is_one_operation_under_both_faces(argv, options):
    """Issue 43: api.plan gives what `collbench plan` prints, from one operation."""
    done = run_main(["plan", *argv])
    planned = api.plan(**options)
    assert done.returncode == 0
    assert done.stdout.splitlines()[-2:] == [f"total: {len(planned.plan)} groups in {len(planned.plan.rounds)} "
                                             f"rounds, {planned.measurements} measurements", planned.estimate.line()]


def test_a_sweep_made_by_api_spec_plans_as_given():
    """A sweep from api.spec (its output made absolute) is taken by a command that writes nothing."""
    planned = api.plan(api.spec(patterns=["pairwise"]), inventory="4x2cpu")
    assert {g.pattern for g in planned.plan.groups} == {"pairwise"}
    with pytest.raises(UsageError, match=r"^collbench.api: group_timeout 7.0 in the sweep given: not an option of "
                                         "collbench plan"):
        api.plan(api.spec(group_timeout=7), inventory="4x2cpu")


@pytest.mark.parametrize("call, said", [
    (lambda: api.plan(inventory="64x8", group_timeout=5),
     "collbench.api: key 'group_timeout' is not an option of collbench plan"),
    (lambda: api.plan(inventory="64y8"), "--inventory '64y8': expected NODESxRANKS"),
    (lambda: api.doctor(patterns=["ring"]), "collbench.api: key 'patterns' is not an option of collbench doctor"),
    (lambda: api.doctor(nodes="10.0.0.1"), "nodes '10.0.0.1': a list of nodes, not one string"),
    (lambda: api.replay("dumps/", collectives=["all_gather"]),
     "collbench.api: key 'collectives' is not an option of collbench replay"),
    (lambda: api.replay("no such dumps/", repeat=0), "--repeat 0: must be between 1 and 1000"),
])
def test_plan_doctor_and_replay_refuse_what_their_commands_do_not_take(call, said):
    with pytest.raises(UsageError, match="^" + re.escape(said)):
        call()


def test_compare_takes_one_path_for_two_runs_of_one_folder(tmp_path):
    """`compare PATH --baseline-run A --new-run B` is `compare PATH PATH ...`, for both faces."""
    from tests.synthetic import write_run

    out = str(tmp_path / "res")
    write_run(out, "a", minute=0)
    write_run(out, "b", minute=1, slow_pair=(0, 1), slow_factor=0.5)
    write_run(out, "c", minute=2)
    one = run_main(["compare", out, "--baseline-run", "a", "--new-run", "b", "--format", "json"])
    two = run_main(["compare", out, out, "--baseline-run", "a", "--new-run", "b", "--format", "json"])
    assert one.returncode == two.returncode == 1 and one.stdout == two.stdout and '"new_run": "b"' in one.stdout
    found = api.compare(out, baseline_runs=["a"], new_run="b")
    assert found.new_run == "b"
    # what the command prints is the operation's own summary and rows (issue 43: api.compare gives it)
    tables = json.loads(one.stdout)["tables"]
    assert json.loads(json.dumps({"summary": [found.summary()], "matched": found.rows()}, default=str)) == \
        {"summary": tables["summary"], "matched": tables["matched"]}
    latest = run_main(["compare", out, "--format", "json"])  # no run ids: its latest against those before
    assert latest.stdout == run_main(["compare", out, out, "--format", "json"]).stdout and '"new_run": "c"' in \
        latest.stdout


@pytest.mark.parametrize("argv, options", [
    (["--every", "0"], {"every": "0"}),
    (["--every", "5x"], {"every": "5x"}),
    (["--cycles", "-1"], {"cycles": -1}),
    (["--baseline-cycles", "0"], {"baseline_cycles": 0}),
    (["--retention", "12h"], {"retention": "12h"}),
    (["--reconnect-timeout", "400d"], {"reconnect_timeout": "400d"}),
    (["--threshold", "5"], {"threshold": 5.0}),
    (["--min-fraction", "0"], {"min_fraction": 0.0}),
])
def test_watch_refuses_the_same_values_from_both_faces(tmp_path, argv, options):
    """Issue 43: watch's duration, cycle and retention checks lived in the command alone; they are
    WatchOptions' now, and api.watch says the command's line (before any Ray)."""
    done = run_main(["watch", "--output", str(tmp_path / "out"), *argv])
    assert done.returncode == 2 and done.stderr.startswith("collbench: error: ")
    said = done.stderr.strip().removeprefix("collbench: error: ")
    with pytest.raises(UsageError) as refused:
        api.watch(output=str(tmp_path / "out"), **options)
    assert str(refused.value) == said
    assert not (tmp_path / "out").exists()


def test_watch_takes_the_commands_sweep_fields_only():
    with pytest.raises(UsageError, match=r"^collbench.api: key 'root' is not an option of collbench watch"):
        api.watch(root=1)


def test_predict_is_one_operation_under_both_faces(tmp_path):
    """Issue 43: predict was a whole operation on an argparse Namespace; api.predict gives the
    tables the command prints, and refuses what it refuses with the same line."""
    import json as jsonlib

    from tests.synthetic import write_run

    out = str(tmp_path / "res")
    write_run(out, "a", nodes=6, minute=0)
    done = run_main(["predict", out, "--params", "7e9", "--dp", "8", "--what-if", "dp=16", "--format", "json"])
    found = api.predict(out, params=7e9, dp=8, what_if=["dp=16"])
    assert done.returncode == found.exit_code
    assert jsonlib.loads(done.stdout)["tables"] == jsonlib.loads(jsonlib.dumps(found.tables, default=str))
    refused = run_main(["predict", out, "--params", "7e9", "--pp", "3"])
    with pytest.raises(UsageError) as said:
        api.predict(out, params=7e9, pp=3)
    assert refused.returncode == 2 and refused.stderr == f"collbench: error: {said.value}\n"
    with pytest.raises(UsageError, match=r"^collbench.api: key 'gpus' is not an option of collbench predict"):
        api.predict(out, params=7e9, gpus=8)


def test_the_slurm_nodes_not_joined_are_named_by_slurm_whatever_the_host_is_called():
    """A node joins Ray under its host name and address, which Slurm's NodeHostName and NodeAddr
    give; a name no joined node answers to is named (scontrol read where it answers, else names)."""
    from orchestrator.scheduler import slurm_not_joined

    said = ("NodeName=slm0 Arch=x86_64 NodeAddr=10.0.0.10 NodeHostName=h-slm0 Version=22.05\n"
            "NodeName=slm1 NodeAddr=10.0.0.11 NodeHostName=h-slm1\nNodeName=slm2 NodeAddr=10.0.0.12 NodeHostName=h-slm2\n")
    calls = []

    def scontrol(argv, **kw):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, said, "")

    env = {"SLURM_JOB_NODELIST": "slm[0-2]"}
    assert slurm_not_joined(env, {"h-slm0.lab.example"}, {"10.0.0.11"}, run=scontrol) == ["slm2"]
    assert calls == [["scontrol", "show", "node", "-o", "slm[0-2]"]]

    def absent(argv, **kw):
        raise FileNotFoundError(argv[0])
    assert slurm_not_joined(env, {"slm0", "h-slm1"}, set(), run=absent) == ["slm1", "slm2"]  # names alone
    assert slurm_not_joined({}, set(), set(), run=absent) == []


def test_nodes_and_exclude_take_slurm_names_inside_a_slurm_job():
    """`--exclude slm2` inside a job whose nodes' host names are h-slmI: Slurm's NodeHostName and
    NodeAddr find the Ray node; outside a Slurm job or without names, scontrol is not asked."""
    from orchestrator.scheduler import aliases
    from orchestrator.sweep.inventory import Inventory, Node, select

    said = "".join(f"NodeName=slm{i} NodeAddr=10.0.0.1{i} NodeHostName=h-slm{i}\n" for i in range(3))
    asked = []

    def scontrol(argv, **kw):
        asked.append(argv)
        return subprocess.CompletedProcess(argv, 0, said, "")

    env = {"SLURM_JOB_NODELIST": "slm[0-2]", "SLURM_JOB_ID": "9"}
    inv = Inventory(tuple(Node(f"id{i}", f"10.0.0.1{i}", f"h-slm{i}", 0, 1) for i in range(3)))
    named = aliases(("slm2",), env, run=scontrol)
    assert named == {"slm2": {"h-slm2", "10.0.0.12"}}
    assert [n.hostname for n in select(inv, (), ("slm2",), named).nodes] == ["h-slm0", "h-slm1"]
    assert [n.ip for n in select(inv, ("slm1", "10.0.0.10"), (), aliases(("slm1", "10.0.0.10"), env,
                                                                          run=scontrol)).nodes] == ["10.0.0.10", "10.0.0.11"]
    with pytest.raises(UsageError, match=r"^--nodes slm7: not a node of the cluster"):
        select(inv, ("slm7",), (), aliases(("slm7",), env, run=scontrol))
    asked.clear()
    assert aliases((), env, run=scontrol) == {} and aliases(("slm2",), {}, run=scontrol) == {} and asked == []


def test_the_nodes_a_run_waits_for_come_from_the_option_or_the_slurm_job():
    """Issue 44: inside a Slurm job the driver knows the allocation's size; --wait-nodes overrides it."""
    from orchestrator.scheduler import nodes_to_wait_for

    slurm = {"SLURM_JOB_NUM_NODES": "3", "SLURM_JOB_ID": "7"}
    assert nodes_to_wait_for(None, slurm) == (3, "the Slurm job's nodes, $SLURM_JOB_NUM_NODES")
    assert nodes_to_wait_for(None, {"SLURM_NNODES": "2"}) == (2, "the Slurm job's nodes, $SLURM_JOB_NUM_NODES")
    assert nodes_to_wait_for(0, slurm) == (0, "--wait-nodes") and nodes_to_wait_for(5, {}) == (5, "--wait-nodes")
    assert nodes_to_wait_for(None, {}) == (0, "") and nodes_to_wait_for(None, {"SLURM_JOB_NUM_NODES": "x"}) == (0, "")
    with pytest.raises(UsageError, match=r"^--wait-nodes -1: must be at least 0"):
        api.spec(wait_nodes=-1)
