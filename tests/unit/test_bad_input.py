"""Bad input exits 2 with one line naming the value, before any actor starts, writing nothing:
each case in this process with Ray out of reach (tests/offline.py); a handful from a fresh
interpreter, for the process boundary: tests/integration/test_bad_input.py."""

from __future__ import annotations

import pytest

from tests.offline import Tripwire, call

CASES = [
    (["-b", "1M", "-e", "1K"], "--min-bytes 1048576 is larger than --max-bytes 1024"),
    (["--collectives", "all_reduce,alltoall"], "--collectives: unknown value 'alltoall'"),
    (["--collectives", ","], "--collectives: empty list"),
    (["-b", "0"], "--min-bytes 0: must be at least 1"),
    (["-e", "12Q"], "--max-bytes '12Q': expected a byte size"),
    (["-n", "-5"], "--iters -5: must be at least 1"),
    (["-w", "x"], "--warmup 'x': expected an integer"),
    (["--backend", "gloo", "--dtypes", "float8_e5m2"], "float8_e5m2 is not supported by backend gloo"),
    (["--dtypes", "float128"], "--dtypes: unknown value 'float128'"),
    (["--op", "avg"], "--op: unknown value 'avg'"),
    (["--patterns", "intra,ring"], "--patterns: unknown pattern 'ring'"),
    (["--env", "LD_PRELOAD=/x.so"], "--env LD_PRELOAD: only communication variables"),
    (["--group-timeout", "-1"], "--group-timeout '-1': expected a duration such as 30s, 5m, 1h or 2d"),
    (["--group-timeout", "nan"], "--group-timeout 'nan': expected a duration such as 30s, 5m, 1h or 2d"),
    (["--group-timeout", "0s"], "--group-timeout '0s': must be a positive duration"),
    (["--group-sizes", "2,x"], "--group-sizes '2,x': expected a comma-separated list of integers"),
    (["--output", "{tmp}/file/below"], "is not writable"),
    (["--output", "{tmp}/file"], "exists and is not a directory"),
    (["--config", "{tmp}/unknown.yaml"], "unknown key 'max_byte'"),
    (["--config", "{tmp}/wrongtype.yaml"], "--iters 'ten': expected an integer"),
    (["--config", "{tmp}/missing.yaml"], "--config {tmp}/missing.yaml: cannot read it (No such file or directory)"),
    (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    # root passes os.access() on /proc, which refuses new files all the same
    (["--output", "/proc/forbidden"], "--output /proc/forbidden: /proc is not writable"),
    (["--output", "gs://bucket/x?colour=red"], "--output gs://bucket/x?colour=red: unknown option colour"),
    (["--retry-failed"], "--retry-failed: only with --resume RUN_ID"),
    (["--config", "{tmp}/broken.yaml"], "--config {tmp}/broken.yaml: not valid YAML at line 3, column 9"),
    (["--config", "{tmp}/envbool.yaml"], "--env NCCL_IB_DISABLE: True is not a string or number"),
    (["-d", "half,float128"], "--dtypes: unknown value 'float128'"),
]


@pytest.mark.parametrize("args, message", CASES, ids=[c[1][:40] for c in CASES])
def test_bad_input_exits_2_with_one_line(offline_cli, tmp_path, args, message):
    (tmp_path / "file").write_text("not a directory")
    (tmp_path / "unknown.yaml").write_text("max_byte: 1K\n")
    (tmp_path / "wrongtype.yaml").write_text("iters: ten\n")
    (tmp_path / "broken.yaml").write_text("env:\n  NCCL_ALGO: Ring\niters: 5: 6\n")
    (tmp_path / "envbool.yaml").write_text("env: {NCCL_IB_DISABLE: yes}\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    out = tmp_path / "out"
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if "--output" not in args:
        args += ["--output", str(out)]
    code, stdout, stderr = _refused(["run", *args])
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("collbench: error: "), stderr
    assert message.replace("{tmp}", str(tmp_path)) in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written
    assert stdout == ""


OTHER_COMMANDS = [
    (["qualify", "-d", "all"], "--dtype all: qualify measures one"),
    (["qualify", "--collectives", "all_reduce,broadcast"], "--collective all_reduce,broadcast: qualify measures one"),
    (["qualify", "--topology", "/nonexistent/topology.conf"], "--topology /nonexistent/topology.conf: cannot read it"),
    (["plan", "--inventory", "2x2cpu", "--backend", "nccl"], "--backend nccl: the cluster has no GPU"),
    (["plan", "--inventory", ""], "--inventory"),
]


@pytest.mark.parametrize("args, message", OTHER_COMMANDS, ids=[" ".join(c[0])[:40] for c in OTHER_COMMANDS])
def test_other_commands_refuse_bad_input_in_one_line(offline_cli, tmp_path, args, message):
    code, stdout, stderr = _refused([*args, *(["--output", str(tmp_path / "out")] if args[0] == "qualify" else [])])
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], stderr
    assert list(tmp_path.iterdir()) == [] and stdout == ""


def _refused(argv: list[str]) -> tuple[int, str, str]:
    try:
        return call(argv)
    except Tripwire as e:  # pragma: no cover - the failure's message
        pytest.fail(f"{argv}: {e} before refusing")
