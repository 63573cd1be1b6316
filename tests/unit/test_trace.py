"""Flight Recorder dumps (recorded from real DDP, FSDP and TP x DP jobs: tests/fixtures/flight_recorder)
to the ops `collbench replay` runs, their rows, the per-step tables and `predict --trace`. No Ray."""

from __future__ import annotations

import os
import pickle
import shutil

import pandas as pd
import pytest

from orchestrator.analysis import predict, replay
from orchestrator.errors import UsageError
from orchestrator.execution import rows
from orchestrator.execution.replaying import ReplayPlanner
from orchestrator.sweep import trace
from orchestrator.sweep.inventory import Inventory, Node
from orchestrator.sweep.planner import case_deadline_s
from orchestrator.sweep.spec import SweepSpec
from workloads.messages import ReplayTiming
from workloads.registry import collective_of

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "flight_recorder")


def _load(name: str) -> trace.Trace:
    return trace.load([os.path.join(FIXTURES, name)])


def _program(name: str, **kw):
    t = _load(name)
    return t, *trace.program(t, trace.find_steps(t.ops[0], kw.pop("period", None)), gaps=kw.pop("gaps", False))


def test_a_ddp_trace_is_its_buckets_step_by_step_without_its_set_up():
    t, prog, notes = _program("ddp")
    assert t.world_size == 2 and t.groups == {"0": (0, 1)}
    first = t.ops[0][:6]  # DDP's set-up: a shape check, its broadcasts, the first step's bucket
    assert [o.name for o in first][:3] == ["all_gather", "broadcast", "broadcast"]
    assert prog.steps == 4 and [len(ops) for ops in prog.ops] == [4, 4]
    params = 2 * (256 * 256 + 256)  # the job's 2 Linear(256, 256): one bucket of every gradient
    assert {(o.kind, o.dtype, o.in_numel, o.msg_bytes) for o in prog.ops[0]} == {("all_reduce", "float32", params,
                                                                                  4 * params)}
    assert [o.step for o in prog.ops[0]] == [0, 1, 2, 3] and [o.seq for o in prog.ops[0]] == [7, 8, 9, 10]
    assert any("6 op(s) of rank 0 before the first whole step" in n for n in notes)


def test_an_fsdp_trace_gathers_each_layer_and_its_steps_are_found_by_their_pauses():
    t, prog, notes = _program("fsdp")
    steps = trace.find_steps(t.ops[0])
    assert (steps.period, steps.count) == (6, 5) and "pause" in steps.how  # 2 gathers fwd, 2 bwd, 2 reductions
    kinds = [o.kind for o in prog.ops[0] if o.step == 0]
    assert sorted(kinds) == ["all_gather"] * 4 + ["all_reduce"] * 2
    layer = 256 * 256 + 256
    gather = next(o for o in prog.ops[0] if o.kind == "all_gather")
    assert (gather.in_numel, gather.out_numel, gather.msg_bytes) == (layer // 2, layer, 4 * layer)  # nccl-tests' S
    assert notes == []  # 5 whole steps of 6, nothing before or after them


def test_tp_and_dp_groups_are_found_from_the_dumps_and_placed_as_the_job_placed_them():
    t, prog, _ = _program("tp_dp")
    assert sorted(t.groups.values()) == [(0, 1), (0, 2), (1, 3), (2, 3)]
    assert prog.steps == 4 and all(len(ops) == 16 for ops in prog.ops)
    # two nodes of two ranks: TP pairs inside a node, DP pairs across them
    inv = Inventory((Node("a", "10.0.0.1", "a", 0, 2), Node("b", "10.0.0.2", "b", 0, 2)))
    planner = ReplayPlanner(prog, trace_ranks_per_node=2)
    assert planner.placement(inv) == (0, 1, 2, 3)
    (group,), = planner.plan(SweepSpec(), inv).rounds
    (case,) = planner.cases(group)
    assert case.replay is prog and case_deadline_s(SweepSpec(), case) > SweepSpec().group_timeout_s
    with pytest.raises(UsageError, match="needs 4 node"):
        ReplayPlanner(prog, trace_ranks_per_node=1).placement(inv)
    fits = {("all_reduce", "intra", 2): predict.FitRef("all_reduce", "intra", 2, 10.0, 1.0, 1, 1 << 30),
            ("all_reduce", "inter", 2): predict.FitRef("all_reduce", "inter", 2, 100.0, 0.1, 1, 1 << 30),
            ("all_gather", "inter", 2): predict.FitRef("all_gather", "inter", 2, 50.0, 0.1, 1, 1 << 30)}
    steps, terms = predict.trace_steps(prog, fits, ranks_per_node=2)
    per_rank_us = 2 * (10 + 16384 / 1e3) + (100 + 65536 / 1e2) + (50 + 8192 / 1e2)  # 2 TP, 1 DP reduce, 1 gather
    assert [s["comm_ms"] for s in steps] == pytest.approx([per_rank_us / 1e3] * 4)
    topo = {(t_["process_group"], t_["term"].split()[0]): t_["topology"] for t_ in terms}
    assert topo[("1", "all_reduce")] == "intra" and topo[("3", "all_reduce")] == "inter"
    tp_term = next(t_ for t_ in terms if t_["process_group"] == "1")
    assert tp_term["count"] == 8 and tp_term["time_ms"] == pytest.approx(2 * (10 + 16.384) / 1e3)  # per step


def test_replayed_rows_take_each_op_at_its_slowest_member_and_the_steps_sum_them():
    t, prog, _ = _program("tp_dp")
    base = {"run_id": "r", "backend": "gloo", "group_id": "r0-g0", "pattern": "replay", "round": 0,
            "groups_in_round": 1, "ranks": [10, 11, 12, 13], "local_ranks": [0, 1, 0, 1],
            "hosts": ["a", "a", "b", "b"], "node_ips": ["1", "1", "2", "2"], "node_ids": ["A", "A", "B", "B"],
            "devices": ["cpu"] * 4, "pids": [1, 2, 3, 4], "world_size": 4}
    # rank j spends (j + 1) * 100 us on its k-th op of every step, every repeat
    timings = [[ReplayTiming(i, r, (j + 1) * 100.0 * (1 + i % 4)) for r in range(2) for i in range(len(prog.ops[j]))]
               for j in range(4)]
    from dataclasses import replace
    prog2 = replace(prog, repeat=2)
    from workloads.messages import Case
    case = Case("replay", "float32", "none", False, (), 2, 1, 0, replay=prog2)
    out = rows.replay_rows(base, case, timings)
    assert len(out) == 2 * 4 * (2 * 2 + 2 * 2)  # 2 repeats x 4 steps x (2 TP groups x 2 ops + 2 DP groups x 2 ops)
    assert sorted({r["step"] for r in out}) == list(range(8))  # the second pass numbers on
    tp = next(r for r in out if r["process_group"] == "2" and r["step"] == 0)  # ranks 2 and 3, its first op
    assert tp["time_us"] == 400.0 and tp["rank_time_us"] == [300.0, 400.0] and tp["ranks"] == [12, 13]
    assert (tp["topology"], tp["n_nodes"], tp["world_size"]) == ("intra", 1, 2)
    dp = next(r for r in out if r["process_group"] == "4" and r["collective"] == "all_gather" and r["step"] == 3)
    assert dp["topology"] == "inter" and dp["time_us"] == 4 * 100.0 * 4 and dp["msg_bytes"] == 2 * 1024 * 4
    factor = collective_of("all_gather").busbw_factor(2)
    assert dp["busbw_gbps"] == pytest.approx(dp["msg_bytes"] / 1600.0 / 1e3 * factor)
    df = pd.DataFrame(out)
    steps = replay.step_times(df)
    # rank 3 is slowest: (1+2) * 400 on its TP group, (3+4) * 400 on its DP group, per step
    assert steps[0]["rank"] == 13 and steps[0]["comm_us"] == pytest.approx(10 * 400.0)
    tables = replay.tables(df)
    assert [r["comm_ms"] for r in tables["replay_steps"]] == pytest.approx([4.0] * 8)
    shares = {r["process_group"]: r["share"] for r in tables["replay_groups"]}
    assert shares["2"] == pytest.approx(0.3) and shares["4"] == pytest.approx(0.7) and shares["1"] == 0
    assert set(tables["replay_steps"][0]) == set(replay.STEP_COLUMNS)
    assert set(tables["replay_groups"][0]) == set(replay.GROUP_COLUMNS)


def _ops(names_gaps_us: list[tuple[str, float]]) -> list[trace.TraceOp]:
    t, out = 0, []
    for i, (name, gap) in enumerate(names_gaps_us):
        t += int(gap * 1e3)
        out.append(trace.TraceOp(0, i, "0", "default_pg", i + 1, name, "all_reduce", "float32",
                                 1 << (10 + len(name)), 1, t, None))
    return out


def test_steps_are_the_unit_that_repeats_between_pauses_else_the_one_that_covers_most():
    unit = [("ab", 30_000.0), ("abc", 100.0), ("ab", 120.0)]  # a pause of 30 ms starts each step
    ops = _ops([("x", 0.0), ("y", 50.0)] + unit * 5)
    steps = trace.find_steps(ops)
    assert (steps.period, steps.first, steps.count) == (3, 2, 5)
    flat = _ops([("x", 0.0)] + [("ab", 100.0), ("abc", 100.0)] * 4)  # no pause: the repeating unit, from its start
    steps = trace.find_steps(flat)
    assert (steps.period, steps.first, steps.count) == (2, 1, 4) and "--ops-per-step" in steps.how
    given = trace.find_steps(ops, period=3)
    assert (given.first, given.count) == (2, 5)  # set-up before the repeats, not a remainder counted back
    with pytest.raises(UsageError, match="--ops-per-step 99"):
        trace.find_steps(ops, period=99)


def test_bad_dumps_are_refused_in_one_line_and_a_pickle_that_would_run_code_does_not(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'ran'}",))

    (tmp_path / "evil").mkdir()
    (tmp_path / "evil" / "fr_rank0").write_bytes(pickle.dumps({"entries": [Evil()]}))
    refused = r"fr_rank0: not a Flight Recorder dump \(UnpicklingError: refused posix.system"
    with pytest.raises(UsageError, match=refused):
        trace.load([str(tmp_path / "evil")])
    assert not (tmp_path / "ran").exists()
    (tmp_path / "text0").write_text("hello")
    with pytest.raises(UsageError, match="text0: not a Flight Recorder dump"):
        trace.load([str(tmp_path / "text0")])
    with pytest.raises(UsageError, match="no such file or folder"):
        trace.load([str(tmp_path / "missing")])
    with pytest.raises(UsageError, match="does not end in a rank number"):
        (tmp_path / "norank").write_bytes(b"x")
        trace.load([str(tmp_path / "norank")])
    half = tmp_path / "half"
    half.mkdir()
    shutil.copy(os.path.join(FIXTURES, "tp_dp", "fr_rank1"), half / "fr_rank1")
    with pytest.raises(UsageError, match="rank 0: no dump"):
        trace.load([str(half)])
    with pytest.raises(UsageError, match="rank 1: more than one dump"):
        trace.load([str(half), str(half / "fr_rank1")])
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "fr_rank0").write_bytes(pickle.dumps({"version": "2.10", "entries": []}))
    with pytest.raises(UsageError, match="no collective"):
        trace.load([str(tmp_path / "empty")])
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "fr_rank0").write_bytes(pickle.dumps({"entries": [{"profiling_name": "gloo:all_reduce"}]}))
    with pytest.raises(UsageError, match="entry 0: not a Flight Recorder entry"):
        trace.load([str(tmp_path / "odd")])


def _op(rank, i, group, seq, t_us, numel=1024, name="all_reduce"):
    return trace.TraceOp(rank, i, group, "", seq, name, "all_reduce", "float32", numel, numel, int(t_us * 1e3), None)


def test_an_op_is_in_one_step_on_every_member_and_one_some_member_lacks_is_left_out():
    # ranks 0,1 in group A (rank 0's steps: a pause before each); ranks 2,3 in group B with other sizes,
    # their clocks apart: rank 2 issues just after rank 0's step starts, rank 3 just before
    a = [_op(0, i, "A", i + 1, 10_000 * (i // 2) + 10 * (i % 2)) for i in range(6)]
    a1 = [_op(1, i, "A", i + 1, 10_000 * (i // 2) + 10 * (i % 2)) for i in range(6)]
    b2 = [_op(2, i, "B", i + 1, 10_000 * (i // 2) + 10 * (i % 2) + 0.5, numel=4096) for i in range(6)]
    b3 = [_op(3, i, "B", i + 1, 10_000 * (i // 2) + 10 * (i % 2) - 0.5, numel=4096) for i in range(6)]
    t = trace.Trace(4, {0: tuple(a), 1: tuple(a1), 2: tuple(b2), 3: tuple(b3)}, {"A": (0, 1), "B": (2, 3)},
                    {"A": "", "B": ""}, ())
    steps = trace.find_steps(t.ops[0])
    assert (steps.period, steps.count) == (2, 3)
    prog, notes = trace.program(t, steps, gaps=True)
    b_ops = [[(o.seq, o.step) for o in prog.ops[r]] for r in (2, 3)]
    assert b_ops[0] == b_ops[1]  # every member replays the same ops in the same steps: no rank waits alone
    assert (1, 0) not in b_ops[0]  # seq 1: rank 3 issued it before rank 0's first step: left out on both
    assert any("did not record within the steps" in n for n in notes)
    offsets = [o.offset_us for o in prog.ops[3] if o.step == 1]
    assert offsets[0] == 0.0  # --gaps: from the rank's own start of the step, not rank 0's clock


def test_the_ops_of_a_coalesced_block_are_rows_of_their_own():
    ops = [_op(0, i, "0", 7, i, numel=1000 * (i + 1)) for i in range(3)]  # one sequence number, three ops
    t = trace.Trace(1, {0: tuple(ops)}, {"0": (0,)}, {"0": "default_pg"}, ())
    prog, _ = trace.program(t, trace.find_steps(t.ops[0], period=3), gaps=False)
    assert [o.part for o in prog.ops[0]] == [0, 1, 2]
    from workloads.messages import Case
    base = {"run_id": "r", "backend": "gloo", "group_id": "g", "pattern": "replay", "ranks": [0], "local_ranks": [0],
            "hosts": ["a"], "node_ips": ["1"], "node_ids": ["A"], "devices": ["cpu"], "pids": [1], "world_size": 1}
    out = rows.replay_rows(base, Case("replay", "float32", "none", False, (), 1, 1, 0, replay=prog),
                           [[ReplayTiming(i, 0, 10.0 * (i + 1)) for i in range(3)]])
    assert [(r["msg_bytes"], r["time_us"]) for r in out] == [(4000, 10.0), (8000, 20.0), (12000, 30.0)]


def test_a_negative_intercept_never_prices_a_smaller_size_above_a_larger_one():
    ref = predict.FitRef("all_reduce", "inter", 2, -40.0, 1.0, 100_000, 1 << 20)
    times = [ref.time_us(b) for b in (10, 50_000, 99_999, 100_000, 200_000)]
    assert times == sorted(times) and times[0] == times[3] == pytest.approx(60.0)
