"""Bad input exits 2 with one line naming the value, before any actor starts, writing nothing."""

from __future__ import annotations

import socket

import pytest

from tests.helpers import run_cli

# the process boundary: each refused in a fresh interpreter, as a user meets it (every message, and
# every other command's, is checked in this process by tests/unit/test_bad_input.py)
BOUNDARY = [
    (["-b", "1M", "-e", "1K"], "--min-bytes 1048576 is larger than --max-bytes 1024"),
    (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["--output", "{tmp}/file"], "exists and is not a directory"),
]


@pytest.mark.parametrize("args, message", BOUNDARY, ids=[c[1][:40] for c in BOUNDARY])
def test_bad_input_exits_2_with_one_line_from_a_fresh_process(tmp_path, args, message):
    (tmp_path / "file").write_text("not a directory")
    before = sorted(p.name for p in tmp_path.iterdir())
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if "--output" not in args:
        args += ["--output", str(tmp_path / "out")]
    proc = run_cli(["run", *args], env={"PATH": "/usr/bin:/bin", "RAY_ADDRESS": "127.0.0.1:1"}, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("collbench: error: ") and message in lines[0], proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written
    assert proc.stdout == ""


def test_pattern_needing_more_nodes_than_exist(ray_head, tmp_path):
    proc = run_cli(["run", "--patterns", "pairwise", "--output", str(tmp_path / "out")], env=ray_head.env())
    assert proc.returncode == 2
    assert "collbench: error: --patterns pairwise: needs at least 2 nodes, the cluster has 1" in proc.stderr
    assert not (tmp_path / "out").exists()
    assert "collbench: run" not in proc.stdout  # no actors were created


def test_a_run_waits_for_the_nodes_it_expects_and_stops_naming_those_that_joined(ray_head, tmp_path):
    """Issue 44: in a Slurm job of two nodes whose second Ray never joined, `collbench run` measured
    the one that did and exited 0. It waits (here --group-timeout 3 s) and refuses, exit 2, in one line;
    --wait-nodes names the count itself, and 0 or a count met starts at once."""
    env = {**ray_head.env(), "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": f"{socket.gethostname()},gpu7"}
    proc = run_cli(["run", "--group-timeout", "3", "--output", str(tmp_path / "out")], env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    why = "the Slurm job's nodes, $SLURM_JOB_NUM_NODES"
    assert f"collbench: waiting for 2 node(s) ({why}), up to 3 s: 1 joined" in proc.stdout + proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"collbench: error: 2 node(s) expected ({why}), 1 joined in 3 s: ") and \
        last.endswith("; not joined: gpu7 (Slurm); start the missing nodes' Ray, or give --wait-nodes 1 to measure "
                      "those"), last
    assert not (tmp_path / "out").exists()
    ok = run_cli(["run", "--wait-nodes", "1", "--collectives", "all_reduce", "-b", "1K", "-e", "1K", "-n", "2",
                  "--output", str(tmp_path / "out")], env=env, timeout=300)
    assert ok.returncode == 0 and "waiting for" not in ok.stdout + ok.stderr, ok.stderr[-2000:]
