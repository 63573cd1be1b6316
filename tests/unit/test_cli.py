"""The command line itself: --version, each command's help, plan's inventory (no Ray here)."""

from __future__ import annotations

import argparse
import importlib.metadata

import pytest

from orchestrator.cli import build_parser
from tests.helpers import run_main


def _commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_version_is_the_package_version():
    proc = run_main(["--version"])
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"collbench {importlib.metadata.version('collbench')}"


@pytest.mark.parametrize("command", sorted(_commands()))
def test_every_option_states_its_default_at_most_once(command):
    parser = _commands()[command]
    for action in parser._actions:
        assert (action.help or "").count("(default") <= 1, (command, action.option_strings, action.help)
    help_text = " ".join(parser.format_help().split())  # argparse wraps lines
    assert help_text.count("(default: (default") == 0


def test_plan_lists_only_the_options_it_uses():
    help_text = _commands()["plan"].format_help()
    # --iters, --warmup, --check and --output for its estimate of how long the run would take
    for used in ("--collectives", "--dtypes", "--min-bytes", "--patterns", "--group-sizes", "--address",
                 "--inventory", "--config", "--iters", "--warmup", "--check", "--output"):
        assert used in help_text
    for unused in ("--group-timeout", "--env", "--resume", "--expected", "--deadline-rate"):
        assert unused not in help_text


def test_plan_refuses_an_empty_inventory():
    proc = run_main(["plan", "--inventory", ""])
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["collbench: error: --inventory '': expected NODESxRANKS, such as "
                                                "64x8 or 4x2cpu, or NODESxGPUS/DOMAIN for NVLink domains of DOMAIN "
                                                "nodes, such as 36x4/18"]
    assert proc.stdout == ""


def test_plan_says_rounds_alike_once():
    """Issue 59: 63 pairwise rounds of one shape are one line, not 63; --groups lists each round."""
    proc = run_main(["plan", "--inventory", "64x8", "-e", "1G", "--patterns", "pairwise,intra"])
    assert proc.returncode == 0, proc.stderr
    rounds = [line for line in proc.stdout.splitlines() if line.startswith("round")]
    assert rounds[0].split() == ["rounds", "0-62", "pairwise", "32", "group(s):", "32", "x", "16", "ranks"]
    assert [r.split()[:3] for r in rounds[1:]] == [["round", "63", "intra"], ["round", "64", "intra"],
                                                  ["round", "65", "intra"]]
    assert len({line.index("pairwise" if "pairwise" in line else "intra") for line in rounds}) == 1  # aligned
    listed = run_main(["plan", "--inventory", "4x2", "-e", "1K", "--patterns", "pairwise", "--groups"])
    assert [line.split()[:2] for line in listed.stdout.splitlines() if line.startswith("round")] == [
        ["round", "0"], ["round", "1"], ["round", "2"]]


def test_a_config_key_is_refused_where_the_command_refuses_its_flag(tmp_path):
    config = tmp_path / "q.yaml"
    config.write_text("iters: 3\npatterns: inter\n")
    proc = run_main(["qualify", "--config", str(config)])
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [f"collbench: error: --config {config}: key 'patterns' is not an option of "
                                        "collbench qualify (its keys: collectives, dtypes, min_bytes, max_bytes, "
                                        "step_factor, iters, warmup, check, backend, ranks_per_node, nodes, exclude, wait_nodes, "
                                        "group_timeout, deadline_rate, output, address, verbose, env, expect_net)"]


def test_an_old_config_key_still_works_for_a_release_with_a_note(tmp_path):
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old.write_text("ops: max,min\n")
    new.write_text("op: max,min\n")
    said = run_main(["plan", "--inventory", "2x2cpu", "--collectives", "all_reduce", "--config", str(old)])
    assert said.returncode == 0 and said.stderr == \
        f"collbench: note: --config {old}: key ops is now op; it goes in the next release\n"
    plain = run_main(["plan", "--inventory", "2x2cpu", "--collectives", "all_reduce", "--config", str(new)])
    assert plain.returncode == 0 and plain.stderr == "" and plain.stdout == said.stdout


def test_run_id_is_checked_and_refused_beside_resume(tmp_path):
    """--run-id names the run (a requeued job resumes itself): a path in it is refused as --resume's
    is, and given with --resume it is one line, nothing written."""
    out = str(tmp_path / "out")
    both = run_main(["run", "--output", out, "--run-id", "a", "--resume", "b"])
    assert (both.returncode, both.stdout) == (2, "")
    assert both.stderr == ("collbench: error: --run-id a with --resume b: give one (--run-id resumes its run "
                           "where it exists)\n")
    bad = run_main(["run", "--output", out, "--run-id", "../elsewhere"])
    assert bad.returncode == 2 and bad.stderr.startswith("collbench: error: --run-id '../elsewhere': not a run id")
    assert not (tmp_path / "out").exists()
    # an id that names a qualify's run is not resumed as a sweep
    from orchestrator.results.store import ResultStore

    (tmp_path / "out" / "_runs").mkdir(parents=True)
    ResultStore(out, "q1").write_manifest({"command": "qualify", "state": "interrupted"})
    probe = run_main(["run", "--output", out, "--run-id", "q1"])
    assert (probe.returncode, probe.stderr) == (2, f"collbench: error: --run-id q1: {out} holds a qualify run of "
                                                   "that id, not a sweep; name another\n")


@pytest.mark.parametrize("args, line", [
    (["--leaves", "0"], "--leaves 0: between 1 and the nodes (2), at most 10"),
    (["--nodes", "4", "--leaves", "5"], "--leaves 5: between 1 and the nodes (4), at most 10"),
    (["--nodes", "4", "--leaves", "2", "--leaf-link", "2=1gbit"],
     "--leaf-link '2=1gbit': expected LEAF=RATE with LEAF in 0..1, such as 1=500mbit"),
    (["--nodes", "4", "--leaves", "2", "--uplink", "fast"], "--uplink 'fast': expected a rate such as 400mbit or 1gbit"),
    (["--nodes", "4", "--leaves", "2", "--leaf-link", "1=fast"],
     "--leaf-link '1=fast': expected LEAF=RATE with a rate such as 500mbit"),
    (["--nodes", "4", "--uplink", "1gbit"],
     "--uplink: needs --leaves 2 or more (one leaf is every node on the head's bridge: no uplink to shape)"),
])
def test_lab_leaves_are_checked_before_anything_is_built(args, line):
    """Issue 46's lab: leaf switches with uplinks of their own; a bad count or rate is one line."""
    proc = run_main(["lab", "up", "--name", "zz", *args])
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"collbench: error: {line}\n")
