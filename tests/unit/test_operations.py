"""The operations' options check themselves, so the command line and the Python API refuse the
same values with the same line (api.report took any min_fraction before; the CLI refused it)."""

from __future__ import annotations

import pytest

from orchestrator import api
from orchestrator.errors import UsageError
from orchestrator.operations.compare import CompareOptions
from orchestrator.operations.qualify import DEFAULTS, QualifyOptions, check_spec
from orchestrator.operations.report import ReportOptions
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
    with pytest.raises(UsageError, match=r"^--collectives all_reduce,broadcast: qualify measures one"):
        check_spec(SweepSpec(collectives=("all_reduce", "broadcast")))
    with pytest.raises(UsageError, match=r"^--dtypes all: qualify measures one"):
        api.qualify(dtypes=["all"])
