"""The one formatter's numbers (issue 59: busbw of small sizes printed as 7.184e-06)."""

from __future__ import annotations

import io

import numpy as np

from orchestrator.commands.render import number, render_tables


def test_numbers_read_without_e_notation():
    cases = {7.184e-06: "0.000007184", 0.5: "0.5", 1.0: "1", 123.456: "123.5", 9999.4: "9999",
             12345.6: "12346", 0.0: "0", -0.0421: "-0.0421", 2.5e-13: "2.5e-13", float("inf"): "inf"}
    assert {v: number(v) for v in cases} == cases


def test_a_table_of_small_rates_prints_them_in_full():
    text = render_tables([("busbw", [{"msg_bytes": 16, "busbw_gbps": np.float64(7.184e-06)}])], "table")
    assert text.splitlines() == ["== busbw", "msg_bytes   busbw_gbps", "       16  0.000007184"]


def test_verdict_words_are_coloured_on_a_terminal_only_and_the_columns_stay_aligned(monkeypatch):
    """Issue 59: fail red, warn yellow, ok green, in the status and verdict columns, where the output
    is a terminal and NO_COLOR is unset; the padding is the plain text's, so columns line up."""
    import io
    import re

    from orchestrator.commands.render import colour_enabled, render_tables

    rows = [{"node": "10.0.0.1", "verdict": "pass", "detail": "fail"}, {"node": "10.0.0.22", "verdict": "slow",
                                                                        "detail": ""}]
    plain = render_tables([("verdicts", rows)], "table")
    painted = render_tables([("verdicts", rows)], "table", colour=True)
    assert "\033" not in plain and re.sub(r"\033\[\d+m", "", painted) == plain
    assert "\033[32m   pass\033[0m" in painted and "\033[31m   slow\033[0m" in painted
    assert "\033[31m" not in painted.splitlines()[2].split("pass")[1]  # the detail column's "fail": not a verdict

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert colour_enabled(Tty()) and not colour_enabled(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not colour_enabled(Tty())
    monkeypatch.setenv("NO_COLOR", "")
    monkeypatch.setenv("TERM", "dumb")
    assert not colour_enabled(Tty())


def test_a_runs_outcome_reads_as_its_counts():
    """Issue 59: `result.outcome` in the API printed the observer's internals; its repr is the counts."""
    from orchestrator.execution.outcome import Tally

    t = Tally(groups_ok=3, groups_failed=1, rows=40, n_wrong=2)
    assert repr(t) == "Tally(groups_ok=3, groups_failed=1, groups_skipped=0, rows=40, n_wrong=2, failures=0)"


def test_a_table_wider_than_the_terminal_prints_a_record_per_row_and_files_take_it_whole():
    """Issue 59: compare's matched table ran to 216 characters a line and predict's to 495, each row
    wrapping into the next on a terminal; wider than the screen, each row is a record (psql's
    expanded display), a line per column; a file or a pipe (no width) keeps every table whole."""
    from orchestrator.commands.render import render_tables, terminal_width

    rows = [{"term": "dp gradient all_reduce", "formula": "ceil(shard/bucket) x (alpha + bucket/bw)",
             "status": "slow", "time_ms": 203.39088},
            {"term": "tp activation all_reduce", "formula": "layers/pp x micro_batches x 4 x (alpha + S_act/bw)",
             "status": "ok", "time_ms": None}]
    whole = render_tables([("terms", rows)], "table")
    assert max(len(line) for line in whole.splitlines()) > 80
    assert render_tables([("terms", rows)], "table", width=200) == whole  # it fits: unchanged
    narrow = render_tables([("terms", rows)], "table", width=80)
    assert narrow.splitlines() == [
        "== terms", "-- 1 of 2",
        "term     dp gradient all_reduce", "formula  ceil(shard/bucket) x (alpha + bucket/bw)", "status   slow",
        "time_ms  203.4",
        "-- 2 of 2",
        "term     tp activation all_reduce", "formula  layers/pp x micro_batches x 4 x (alpha + S_act/bw)",
        "status   ok", "time_ms  -"]
    assert "\033[31mslow\033[0m" in render_tables([("terms", rows)], "table", colour=True, width=80)
    assert render_tables([("terms", rows)], "markdown", width=80).startswith("### terms\n\n| term |")
    assert terminal_width(io.StringIO()) is None
