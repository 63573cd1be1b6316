"""Helpers shared by the tests (fixtures live in conftest.py)."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path


def run_cli(args: list[str], env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m orchestrator ARGS` in a subprocess, as a user would run it."""
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        capture_output=True, text=True, timeout=timeout, env=env,
    )


def run_main(args: list[str]) -> subprocess.CompletedProcess:
    """`collbench ARGS` in this process (no Ray, no device: report, compare, predict, plan
    --inventory), with the exit code and output of a subprocess."""
    import contextlib
    import io

    from orchestrator.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as e:  # argparse
            code = e.code if isinstance(e.code, int) else 2
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def nccl_sequence_groups(path) -> list[list[str]]:
    """A recorded sequence of NCCL log groups (tests/fixtures/nccl/sequences), in order: a `# group N`
    line starts each (NCCL never writes one)."""
    groups: list[list[str]] = []
    for line in Path(path).read_text().splitlines():
        if line.startswith("# group "):
            groups.append([])
        else:
            groups[-1].append(line)
    return groups


def replay_into_debug_file(path, groups: list[list[str]]) -> list:
    """The worker's path for a recorded sequence: NCCL appends each group's lines to one file and
    the worker reads its slice (nccl_log.DebugFile); each group's NcclLog, in order."""
    from workloads import nccl_log

    debug = nccl_log.DebugFile(str(path))
    logs = []
    for lines in groups:
        debug.start_group()
        with Path(path).open("a") as out:
            out.write("\n".join(lines) + "\n")
        logs.append(debug.group_log())
    return logs


def stand_in(folder, name: str, exit_code: int = 0, says: str = "") -> str:
    """A stand-in for the command `name` (scontrol, kubectl) in `folder`, to put first on PATH: appends its arguments (one per line, then ---) to folder/calls, says `says` on
    stderr and exits `exit_code`."""
    path = folder / name
    path.write_text(f'#!/bin/sh\nfor a in "$@"; do echo "$a" >> "{folder}/calls"; done\necho --- >> "{folder}/calls"\n'
                    f"[ -n '{says}' ] && echo '{says}' >&2\nexit {exit_code}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(folder)


def parses(command: str) -> str:
    """'' where collbench's parser takes `command` (a `collbench ...` line), else its error."""
    import contextlib
    import io
    import shlex

    from orchestrator.cli import build_parser

    words = shlex.split(command)
    assert words[0] == "collbench", command
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(words[1:])
    except SystemExit as e:
        return err.getvalue().strip().splitlines()[-1] if e.code else ""
    return ""
