"""The Python API never ends its caller's process and, with verbose=False, writes nothing to
stdout or stderr (issue 31): a join that never returns raises ConnectTimeout (the command line
alone ends its process), a run's late notes go through its Voice, and an unreadable results file
is a warning the caller can filter, printed in one line only by the command line."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orchestrator.errors import CollbenchWarning, ConnectTimeout, UsageError
from orchestrator.execution import connect
from orchestrator.execution.session import say_late_interrupt
from orchestrator.execution.voice import COMMAND_LINE, QUIET
from orchestrator.results import dataset
from tests.synthetic import write_run


def test_a_join_that_never_returns_raises_and_the_process_goes_on(monkeypatch, capfd):
    release = threading.Event()
    monkeypatch.setattr(connect.ray, "init", lambda **_: release.wait(60))  # a gRPC listener that is not a GCS
    try:
        with pytest.raises(ConnectTimeout) as raised:
            connect._join("127.0.0.1:1", time.monotonic() + 0.1, "--address 127.0.0.1:1", 0.1)
    finally:
        release.set()
    assert isinstance(raised.value, UsageError) and raised.value.exit_code == 2
    assert str(raised.value).startswith("--address 127.0.0.1:1: could not join a Ray cluster there in 0.1 s "
                                        "(no answer to ray.init); ")
    assert capfd.readouterr() == ("", "")


def test_the_command_line_ends_its_process_after_saying_the_line(tmp_path):
    """A thread that never ends stands for Ray's exit hooks waiting on the stuck join: a normal
    exit would wait for it; the command line exits 2 at once."""
    script = textwrap.dedent("""
        import sys, threading
        from orchestrator import cli
        from orchestrator.commands import report
        from orchestrator.errors import ConnectTimeout

        threading.Thread(target=threading.Event().wait).start()

        def stuck(args):
            raise ConnectTimeout("--address 10.0.0.1:6379: could not join a Ray cluster there in 5 s")

        report.main = stuck
        sys.exit(cli.main(["report", "results"]))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == "collbench: error: --address 10.0.0.1:6379: could not join a Ray cluster there in 5 s\n"


def test_a_late_interrupt_is_said_through_the_voice_only(capfd):
    say_late_interrupt(None, "group", QUIET)
    assert capfd.readouterr() == ("", "")
    say_late_interrupt(None, "group", COMMAND_LINE)
    assert capfd.readouterr() == ("", "\ncollbench: interrupted before any group was measured\n")


def test_an_unreadable_file_is_a_warning_not_a_print(tmp_path, capfd):
    out = str(tmp_path / "res")
    write_run(out, "r1", nodes=3)
    pq.write_table(pa.table({"run_id": [1, 2]}), f"{out}/theirs.parquet")
    with pytest.warns(CollbenchWarning, match="theirs.parquet: skipped, not readable as collbench rows"):
        rows = dataset.load_table(out, "r1")
    assert rows.num_rows > 0
    assert capfd.readouterr() == ("", "")
