"""The command line in this process with Ray and the lab out of reach: what a refused input must
never get to. A case that would connect to Ray or bring a lab up raises Tripwire (not an Exception,
so no handler in the CLI swallows it). `call` is run_main's twin for these cases: the same exit code
and output, in microseconds instead of an interpreter's start-up."""

from __future__ import annotations

import contextlib
import io

import pytest


class Tripwire(BaseException):
    """Raised where a case would reach Ray or bring a lab up."""


@pytest.fixture
def offline_cli(monkeypatch):
    from orchestrator.execution import connect, session
    from orchestrator.lab import cluster

    def trip(*a, **k):
        raise Tripwire("reached Ray")

    # connect.connect checks an address in one line before it waits for it or starts Ray
    monkeypatch.setattr(connect, "wait_for_gcs", trip)
    monkeypatch.setattr(connect, "_join", trip)
    monkeypatch.setattr(connect.ray, "init", trip)
    monkeypatch.setattr(session.Session, "cluster", trip)
    check_host = cluster.check_host

    def checked(*a, **k):
        check_host(*a, **k)
        raise Tripwire("would bring a lab up")

    monkeypatch.setattr(cluster, "check_host", checked)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    # one parser for every case: building it is most of a refused call's time
    from orchestrator import cli

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)


def call(argv: list[str]) -> tuple[int, str, str]:
    """`collbench ARGV` in this process: (exit code, stdout, stderr)."""
    from orchestrator.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 2
    return code, out.getvalue(), err.getvalue()
