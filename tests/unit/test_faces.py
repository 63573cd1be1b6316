"""Both faces, one table (issue 43): for every command, the same options given on the command line
and to its API function reach the one operation as the same options record, and a bad value is
refused by both with the same line, before anything is measured or written.

Each operation is replaced by a recorder that keeps what it was given and stops there (nothing
runs, no Ray); the commands that need no cluster (plan on an inventory, report, compare, predict,
import) are also run whole through both faces and their result objects compared."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from orchestrator import api, cli
from orchestrator.errors import UsageError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NCCL_LOG = FIXTURES / "nccl_tests" / "all_reduce_perf_8xH100.txt"


class Reached(Exception):
    """Raised by a recorder: the operation was called with `given`."""

    def __init__(self, given):
        super().__init__("reached")
        self.given = given


# command -> where each face finds its operation (the command module's name for it, the module the
# API calls through); both are replaced by the recorder
OPERATIONS = {
    "run": ("orchestrator.commands.run.run", "orchestrator.operations.run.run"),
    "replay": ("orchestrator.commands.replay.replay", "orchestrator.operations.replay.replay"),
    "qualify": ("orchestrator.commands.qualify.qualify", "orchestrator.operations.qualify.qualify"),
    "watch": ("orchestrator.commands.watch.watch", "orchestrator.operations.watch.watch"),
    "doctor": ("orchestrator.commands.doctor.doctor", "orchestrator.operations.doctor.doctor"),
    "plan": ("orchestrator.commands.plan.plan", "orchestrator.operations.plan.plan"),
    "predict": ("orchestrator.commands.predict.price", "orchestrator.operations.predict.predict"),
    "report": ("orchestrator.operations.report.report",),
    "compare": ("orchestrator.commands.compare.compare", "orchestrator.operations.compare.compare"),
    "import": ("orchestrator.commands.import_.import_run", "orchestrator.operations.import_.import_run"),
    "attach": ("orchestrator.commands.attach.looks", "orchestrator.operations.attach.looks"),
}


def _cli(argv: list[str]) -> tuple[int | None, str, object]:
    """Exit code, stderr and what reached the operation (None where nothing did)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = cli.main(argv)
        except Reached as r:
            return None, err.getvalue(), r.given
    return code, err.getvalue(), None


def _api(call) -> tuple[str | None, object]:
    """The UsageError's line (None where none) and what reached the operation."""
    try:
        call()
    except Reached as r:
        return None, r.given
    except UsageError as e:
        return str(e), None
    raise AssertionError("the API call returned without reaching the operation")


@pytest.fixture
def recorded(monkeypatch):
    def record(command: str) -> None:
        def recorder(given, *args, **kwargs):
            raise Reached(given)

        for target in OPERATIONS[command]:
            monkeypatch.setattr(target, recorder)

    return record


def _cases(tmp: str) -> list[tuple[str, list[str], object]]:
    """(command, its argv, the same through the API): good values, then bad ones."""
    out = f"{tmp}/out"
    return [
        ("run", ["run", "--collectives", "all_reduce", "-e", "1M", "--ranks-per-node", "2", "--output", out],
         lambda: api.run(collectives=["all_reduce"], max_bytes="1M", ranks_per_node=2, output=out)),
        ("run", ["run", "--patterns", "pairwise", "--iters", "3", "--no-doctor", "--output", out],
         lambda: api.run(patterns=["pairwise"], iters=3, doctor=False, output=out)),
        ("replay", ["replay", "dumps/", "--repeat", "2", "--gaps", "--output", out],
         lambda: api.replay("dumps/", repeat=2, gaps=True, output=out)),
        ("qualify", ["qualify", "--collectives", "all_gather", "-e", "4M", "--threshold", "0.2", "--seed", "3", "--output", out],
         lambda: api.qualify(collectives=["all_gather"], max_bytes="4M", threshold=0.2, seed=3, output=out)),
        ("watch", ["watch", "--cycles", "2", "--every", "90s", "--retention", "7d", "--output", out],
         lambda: api.watch(cycles=2, every="90s", retention="7d", output=out)),
        ("doctor", ["doctor", "--ranks-per-node", "2"], lambda: api.doctor(ranks_per_node=2)),
        ("plan", ["plan", "--inventory", "4x2cpu", "--patterns", "pairwise", "-e", "1M"],
         lambda: api.plan(inventory="4x2cpu", patterns=["pairwise"], max_bytes="1M")),
        ("predict", ["predict", tmp, "--params", "7e9", "--dp", "8", "--what-if", "dp=16"],
         lambda: api.predict(tmp, params=7e9, dp=8, what_if=["dp=16"])),
        ("report", ["report", tmp, "--threshold", "0.2", "--unit", "Gbps"],
         lambda: api.report(tmp, threshold=0.2, unit="Gbps")),
        ("compare", ["compare", tmp, tmp, "--threshold", "0.1", "--by", "shape"],
         lambda: api.compare(tmp, tmp, threshold=0.1, by="shape")),
        ("import", ["import", str(NCCL_LOG), "--output", out, "--run-id", "imp"],
         lambda: api.import_nccl_tests([str(NCCL_LOG)], out, run_id="imp")),
        ("attach", ["attach", "dumps/", "--hang-after", "1m", "--hosts", "a,b"],
         lambda: api.attach("dumps/", hang_after="1m", hosts=["a", "b"])),
        # bad values: refused by both faces in the same line
        ("run", ["run", "--iters", "0"], lambda: api.run(iters=0)),
        ("run", ["run", "--retry-failed"], lambda: api.run(retry_failed=True)),
        ("replay", ["replay", "d/", "--repeat", "0"], lambda: api.replay("d/", repeat=0)),
        ("qualify", ["qualify", "--threshold", "5"], lambda: api.qualify(threshold=5.0)),
        ("qualify", ["qualify", "--collectives", "all_reduce,broadcast"], lambda: api.qualify(collectives=["all_reduce", "broadcast"])),
        ("watch", ["watch", "--every", "0"], lambda: api.watch(every="0")),
        ("plan", ["plan", "--inventory", "0x8"], lambda: api.plan(inventory="0x8")),
        ("predict", ["predict", tmp, "--params", "7e9", "--pp", "3"], lambda: api.predict(tmp, params=7e9, pp=3)),
        ("report", ["report", tmp, "--min-fraction", "0"], lambda: api.report(tmp, min_fraction=0.0)),
        # (a value outside a flag's choices is argparse's usage error on the command line: --by, --topology)
        ("compare", ["compare", tmp, "--threshold", "5"], lambda: api.compare(tmp, threshold=5.0)),
        ("import", ["import", f"{tmp}/no.log", "--output", out], lambda: api.import_nccl_tests([f"{tmp}/no.log"], out)),
        ("attach", ["attach", "d/", "--min-late", "0"], lambda: api.attach("d/", min_late_ms=0)),
    ]


CASE_IDS = ["run", "run-pairwise", "replay", "qualify", "watch", "doctor", "plan", "predict", "report", "compare",
            "import", "attach", "bad-run-iters", "bad-run-retry", "bad-replay-repeat", "bad-qualify-threshold",
            "bad-qualify-collectives", "bad-watch-every", "bad-plan-inventory", "bad-predict-pp", "bad-report-fraction",
            "bad-compare-threshold", "bad-import-missing", "bad-attach-min-late"]


@pytest.mark.parametrize("index", range(len(CASE_IDS)), ids=CASE_IDS)
def test_both_faces_reach_the_one_operation_with_the_same_options(tmp_path, recorded, index):
    command, argv, call = _cases(str(tmp_path))[index]
    recorded(command)
    code, err, by_cli = _cli(argv)
    refused, by_api = _api(call)
    if refused is None:
        assert code is None and by_cli is not None, err
        assert by_cli == by_api  # frozen options records (a doctor's SweepSpec), compared field by field
        assert type(by_cli).__name__.endswith(("Options", "SweepSpec", "LabUp"))
    else:
        assert by_cli is None and by_api is None
        assert code == 2 and err == f"collbench: error: {refused}\n"
    assert not (tmp_path / "out").exists()  # nothing written by either face before the operation


def test_the_table_covers_every_command_and_api_function():
    names = {c for c, _, _ in _cases("/nowhere")}
    assert names == set(OPERATIONS) and len(CASE_IDS) == len(_cases("/nowhere"))
    commands = set(cli.build_parser()._subparsers._group_actions[0].choices) - {"lab"}  # lab: no API function
    assert commands == names


def test_the_commands_that_need_no_cluster_give_the_same_result_objects(tmp_path, monkeypatch):
    """Run whole: what the command's operation returned (kept by a spy) equals what the API returns."""
    from tests.synthetic import write_run

    data = str(tmp_path / "res")
    write_run(data, "a", nodes=6, minute=0)
    write_run(data, "b", nodes=6, minute=1, slow_pair=(0, 1), slow_factor=0.5)
    returned = []

    def spy(target: str):
        module, _, name = target.rpartition(".")
        real = getattr(__import__(module, fromlist=[name]), name)
        monkeypatch.setattr(target, lambda *a, **k: returned.append(real(*a, **k)) or returned[-1])

    spy("orchestrator.commands.plan.plan")
    _cli(["plan", "--inventory", "4x2cpu", "--patterns", "pairwise"])
    assert returned.pop() == api.plan(inventory="4x2cpu", patterns=["pairwise"])

    spy("orchestrator.commands.predict.price")
    _cli(["predict", data, "--params", "7e9", "--dp", "8"])
    assert returned.pop().tables == api.predict(data, params=7e9, dp=8).tables

    spy("orchestrator.operations.report.report")
    _cli(["report", data, "--run", "a"])
    assert returned.pop().report.to_json() == api.report(data, run_id="a").to_json()

    spy("orchestrator.commands.compare.compare")
    code, _, _ = _cli(["compare", data, "--baseline-run", "a", "--new-run", "b"])
    by_cli, by_api = returned.pop(), api.compare(data, baseline_runs=["a"], new_run="b")
    assert by_cli.summary() == by_api.summary() and by_cli.rows() == by_api.rows()
    assert code == by_api.exit_code == 1

    spy("orchestrator.commands.import_.import_run")
    _cli(["import", str(NCCL_LOG), "--output", str(tmp_path / "i1"), "--run-id", "imp"])
    one = returned.pop()
    two = api.import_nccl_tests([str(NCCL_LOG)], str(tmp_path / "i2"), run_id="imp")
    assert (one.run_id, one.rows, one.groups) == (two.run_id, two.rows, two.groups) and one.rows > 0
    assert api.report(str(tmp_path / "i1")).tables == api.report(str(tmp_path / "i2")).tables  # the same rows
