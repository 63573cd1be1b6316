"""The one formatter's numbers (issue 59: busbw of small sizes printed as 7.184e-06)."""

from __future__ import annotations

import numpy as np

from orchestrator.commands.render import number, render_tables


def test_numbers_read_without_e_notation():
    cases = {7.184e-06: "0.000007184", 0.5: "0.5", 1.0: "1", 123.456: "123.5", 9999.4: "9999",
             12345.6: "12346", 0.0: "0", -0.0421: "-0.0421", 2.5e-13: "2.5e-13", float("inf"): "inf"}
    assert {v: number(v) for v in cases} == cases


def test_a_table_of_small_rates_prints_them_in_full():
    text = render_tables([("busbw", [{"msg_bytes": 16, "busbw_gbps": np.float64(7.184e-06)}])], "table")
    assert text.splitlines() == ["== busbw", "msg_bytes   busbw_gbps", "       16  0.000007184"]
