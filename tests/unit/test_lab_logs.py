"""A lab that fails to start is removed with its folder, logs included (orchestrator/lab/cluster.py):
the error says how the Ray head's log ended, not a path that no longer exists."""

from __future__ import annotations

from orchestrator.lab.raynodes import log_tail


def test_the_error_of_a_lab_that_did_not_start_carries_its_log_s_last_lines(tmp_path):
    log = tmp_path / "head.log"
    log.write_text("Usage stats collection is disabled.\n\n" + "".join(f"line {i}\n" for i in range(10))
                   + "OSError: [Errno 98] Address already in use\n\n")
    assert log_tail(str(log)) == "its log ended: line 8 | line 9 | OSError: [Errno 98] Address already in use"
    log.write_text("x" * 1000 + "\n")
    assert log_tail(str(log)) == "its log ended: " + "x" * 300  # one line, at most 300 characters
    log.write_text("")
    assert log_tail(str(log)) == f"its log {log} is empty"
    assert log_tail(str(tmp_path / "gone.log")) == f"its log {tmp_path / 'gone.log'} cannot be read (No such file or directory)"
