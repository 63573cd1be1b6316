"""NCCL's own diagnostics (issue 34, part 3; NCCL 2.31+): the doctor's check, skipped below 2.31 and
on CPU nodes, and the `NCCL DIAG` report read from the examples of NCCL's docs
(tests/fixtures/nccl/diag, README.md there)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.doctor import diagnostics
from orchestrator.doctor.diagnostics import DiagReport, DiagResult
from orchestrator.doctor.facts import Gpu, NodeFacts

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl" / "diag"
GPU = Gpu(index=0, name="NVIDIA H200", bus_id="00000000:18:00.0")


@pytest.mark.parametrize("facts, detail", [
    (NodeFacts("10.0.0.1", nccl="2.27.7"), "skipped: no GPU on the node"),
    (NodeFacts("10.0.0.1", nccl="2.29.2", gpus=(GPU,)), "skipped: NCCL 2.29.2 below 2.31"),
    (NodeFacts("10.0.0.1", nccl="2.30.7", gpus=(GPU,), env={"NCCL_RUN_DIAGNOSTICS": "1"}),
     "skipped: NCCL 2.30.7 below 2.31"),
    (NodeFacts("10.0.0.1", gpus=(GPU,)), "skipped: NCCL's version not read"),
])
def test_skipped_where_nccl_cannot_run_them(facts, detail):
    check = diagnostics.check(facts)
    # nothing to judge: `skip`, not `ok` (issue 45: doctor printed ok for checks that read nothing)
    assert (check.name, check.status.value, check.detail, check.hint) == ("NCCL diagnostics", "skip", detail, "")


def test_said_whether_they_will_run_on_2_31():
    off = diagnostics.check(NodeFacts("10.0.0.1", nccl="2.31.2", gpus=(GPU,)))
    assert off.detail.startswith("NCCL 2.31.2 can check its P2P paths") and "NCCL_RUN_DIAGNOSTICS=1" in off.hint
    on = diagnostics.check(NodeFacts("10.0.0.1", nccl="2.31.2", gpus=(GPU,),
                                     env={"NCCL_RUN_DIAGNOSTICS": "1", "NCCL_RUN_RAS_DIAGNOSTICS": "0"}))
    assert on.detail == ("NCCL 2.31.2 runs its diagnostics at every communicator set-up (NCCL_RUN_DIAGNOSTICS): "
                         "`NCCL DIAG` lines on the stdout of each communicator's rank 0") and on.status.value == "ok"


def test_the_documented_reports():
    active = diagnostics.parse_report((FIXTURES / "active_ok.txt").read_text())
    assert active == DiagReport("NCCL Diagnostics", (DiagResult(
        "OK", "p2p", "verified P2P access in both directions between every GPU pair (56 peer accesses)"),),
        "NCCL diagnostics completed in 245.3 ms across 8 ranks")
    ras = diagnostics.parse_report("some other stdout line\n" + (FIXTURES / "ras_ok.txt").read_text())
    assert ras.title == "RAS Diagnostics" and ras.issues == ()
    assert [r.check for r in ras.results] == ["GPU inventory", "CUDA driver version", "ECC", "NVLink",
                                              "NCCL environment"]
    assert ras.results[0] == DiagResult("OK", "GPU inventory", "8x NVIDIA H100 per node consistent across 8 ranks in "
                                        "comm 0x1234", "node042:12345")
    assert ras.completed == "RAS diagnostics completed in 12.3 ms across 8 RAS peers"
    mismatch = diagnostics.parse_report((FIXTURES / "ras_env_mismatch.txt").read_text())
    assert len(mismatch.issues) == 4 and mismatch.issues[1].message == "NCCL_DEBUG=INFO on rank(s) {0,1,2,3}"
    assert diagnostics.parse_report((FIXTURES / "busy.txt").read_text()) == DiagReport(busy=True)
