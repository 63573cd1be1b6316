"""A run's live progress (issue 59, execution.live and the console; qualify's, a line per round): the
planned work weighted by each case's estimated time, the time left moving from the estimate to the measured pace, a line
redrawn in place on a terminal with the rows printed cleanly beside it, plain lines in a pipe."""

from __future__ import annotations

import dataclasses
import io

import pytest

from orchestrator.execution import live
from orchestrator.execution.console import Console
from orchestrator.execution.events import GroupEnded, GroupFailure, GroupStarted, RowsMeasured
from orchestrator.execution.voice import Voice
from orchestrator.operations.qualify_rounds import Collector, RoundProgress, run_rounds
from orchestrator.sweep.estimate import DEFAULTS, Estimate, estimate
from orchestrator.sweep.inventory import Inventory, Node
from orchestrator.sweep.qualify import Deadlines, Qualifier
from orchestrator.sweep.spec import SweepSpec
from workloads.messages import Status


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _work() -> live.Work:
    # two groups: g0 of three cases (1 s, 1 s, 8 s), g1 of one case (10 s); the estimate says 25 s
    return live.Work.of(Estimate(25.0, "default rates", {"g0": (1.0, 1.0, 8.0), "g1": (10.0,)}), ["g0", "g1"])


def test_the_done_fraction_weighs_each_case_by_its_estimated_time():
    w = _work()
    assert w.fraction() == 0 and w.cases() == (0, 4)
    w.done_cases["g0"] = 2
    assert w.fraction() == pytest.approx(2 / 20) and w.cases() == (2, 4)
    w.ended.add("g0")
    assert w.fraction() == pytest.approx(10 / 20) and w.cases() == (3, 4)
    w.ended.add("g1")
    assert w.fraction() == 1 and w.left_s(40.0) == 0


def test_the_time_left_starts_as_the_estimate_and_moves_to_the_measured_pace():
    w = _work()
    assert w.left_s(0.0) == 25.0 and w.left_s(10.0) == 15.0 and w.left_s(30.0) == 0.0
    w.ended.add("g0")  # half the work done
    # the run is twice as slow as estimated: 50 s for the first half; the pace says 50 s more, the
    # estimate 12.5: weighted by what each has seen, (1 - f)(elapsed + (1 - f) estimate) = 0.5 (50 + 12.5)
    assert w.left_s(50.0) == pytest.approx(31.25)
    w.done_cases["g1"] = 0
    assert w.left_s(50.0) > live.Work.of(Estimate(25.0, "x", {"g0": (1.0,)}), ["g0"]).left_s(50.0)


def test_on_a_terminal_the_line_is_redrawn_in_place_and_rows_print_cleanly_beside_it():
    clock, err, out = Clock(), io.StringIO(), io.StringIO()
    console = Console(2, out=out, progress=err, work=_work(), terminal=True)
    console.live.clock = clock
    console.live.t0 = clock.now
    group = type("G", (), {"group_id": "g0", "pattern": "intra", "round": 0})()
    base = {"hosts": ["h1"], "node_ips": ["10.0.0.1"], "topology": "intra", "world_size": 2, "n_nodes": 1,
            "groups_in_round": 2}
    console.group_started(GroupStarted(group, base))
    clock.now += 4
    console.rows_measured(RowsMeasured(group, ()))
    console.live.draw()
    console.close()
    text = err.getvalue()
    frames = [f for f in text.split("\r") if f]
    assert frames[0].startswith("[") and "0/2 groups, 0/4 cases, 0 s elapsed, ~25 s left" in frames[0]
    assert any("5%" in f and "1/4 cases, 4 s elapsed" in f for f in frames), frames
    assert text.endswith("\r\x1b[K")  # closed: the line is gone, nothing left half-drawn
    assert out.getvalue().startswith("# group g0 (intra, intra)")  # the group's line in stdout, whole


def test_in_a_pipe_the_progress_is_plain_lines_now_and_then():
    clock, err = Clock(), io.StringIO()
    line = live.LiveLine(_work(), err.write, terminal=False, clock=clock)
    line.draw()
    assert err.getvalue() == ""  # not yet: at most one line each PLAIN_EVERY_S
    clock.now += live.PLAIN_EVERY_S
    line.work.done_cases["g0"] = 3
    line.draw()
    # half the work (g0's 10 of 20 estimated seconds) in 30 s: 0.5 x (30 + 0.5 x 25) = 21.25 s left
    assert err.getvalue() == "[progress] 0/2 groups, 3/4 cases, 30 s elapsed, ~22 s left\n"
    assert "\r" not in err.getvalue() and "\x1b" not in err.getvalue()


def test_a_group_end_line_says_the_time_left_from_the_work():
    err = io.StringIO()
    console = Console(2, out=io.StringIO(), progress=err, work=_work(), terminal=False)
    group = type("G", (), {"group_id": "g0", "pattern": "intra", "round": 0})()
    console.group_ended(GroupEnded(group, Status.OK, (), None))
    console.close()
    # g0 ended (half the estimated work) at once: 0.5 x (0 + 0.5 x 25) = 6.25 s left, not 0 x ...
    assert err.getvalue().startswith("[progress] 1/2 groups done, 0s elapsed, ~6s left")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Runner:
    """A runner whose probes all reach 2 GB/s at once, telling its observers as Ray's would, each
    group's live line read as it starts (the screen at that moment)."""

    def __init__(self, spec, observers, screen: io.StringIO) -> None:
        self.spec, self.observers, self.screen, self.seen, self.plans = spec, observers, screen, [], []

    def run(self, plan) -> None:
        self.plans.append(plan)
        for g in plan.groups:
            for o in self.observers:
                o.group_started(GroupStarted(g, {}))
            self.seen.append(self.screen.getvalue().rsplit("\r", 1)[-1])
            rows = ({"msg_bytes": 1 << 20, "n_wrong": 0, "busbw_gbps": 2.0},)
            for o in self.observers:
                o.group_ended(GroupEnded(g, Status.OK, rows, None))


def test_each_qualify_round_has_a_live_line_priced_by_its_probes_and_gone_before_its_round_line(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    inv = Inventory(tuple(Node(f"n{i}", f"10.0.0.{i}", f"h{i}", 0, 2) for i in range(4)))
    spec = SweepSpec(collectives=("all_reduce",), min_bytes=1 << 16, max_bytes=1 << 20, iters=2, warmup=1)
    screen = _Terminal()
    console = Console(None, out=io.StringIO(), progress=screen, rows=False)
    collector = Collector(inv, Deadlines(60.0))
    runner = _Runner(spec, [console, collector], screen)
    said = []
    voice = Voice(lambda line: said.append((line, screen.getvalue())))
    q = Qualifier(4, 2)
    rates = DEFAULTS["gloo"]
    assert run_rounds(q, inv, runner, collector, voice, {"groups": 0}, RoundProgress(console, rates, "gloo")) is None
    assert q.rounds >= 2 and len(said) == q.rounds
    # the first round's probes priced as the estimate prices their plan, its start-up left out (behind it)
    guess = estimate(runner.plans[0], spec, inv, rates, "gloo")
    probes = len(list(runner.plans[0].groups))
    first = runner.seen[0]
    cases = sum(map(len, guess.cases_s.values()))
    assert first.startswith("[") and f"round 1: 0/{probes} probes, 0/{cases} cases, " in first, runner.seen
    assert first.endswith(f" elapsed, ~{live.duration(guess.seconds - rates.start_s)} left\x1b[K"), runner.seen
    for k, (line, shown) in enumerate(said):  # each round's line: the live line erased just before it
        assert line.startswith(f"collbench: round {k + 1} ") and shown.endswith("\r\x1b[K"), (line, shown[-200:])
        assert f"round {k + 1}: " in shown and f"round {k + 2}: " not in shown
    assert console.live is None


def test_a_watch_cycles_console_is_its_live_line_alone():
    """watch's cycles on a terminal, as jobs.sweep builds their console (every line on stderr,
    none on stdout, where --format jsonl writes the cycles): the live line while a cycle measures,
    no group line, row or group-end line, a failed group's line printed cleanly beside it, and
    nothing left when it closes."""
    screen = _Terminal()
    console = Console(2, out=screen, progress=screen, rows=False, work=_work(), terminal=True, ends=False)
    group = type("G", (), {"group_id": "g0", "pattern": "intra", "round": 0})()
    console.group_started(GroupStarted(group, {}))
    console.rows_measured(RowsMeasured(group, ({"status": "ok"},)))
    console.group_ended(GroupEnded(group, Status.OK, (), None))
    frames = [f for f in screen.getvalue().split("\r") if f.startswith("[")]
    assert frames and "0/2 groups" in frames[0] and any("1/2 groups" in f for f in frames), frames
    assert "[progress]" not in screen.getvalue() and "\n" not in screen.getvalue()
    failed = type("G", (), {"group_id": "g1", "pattern": "intra", "round": 0})()
    failure = GroupFailure(Status.FAILED, "rank 1 died", "g1", (1,), ("h (10.0.0.1)",), True)
    console.group_ended(GroupEnded(failed, Status.FAILED, (), failure))
    console.close()
    # the live line erased, the failure's line whole on a line of its own, the live line drawn again
    assert "\r\x1b[K  FAILED: group g1: rank 1 died\n\r[" in screen.getvalue()
    assert screen.getvalue().endswith("\r\x1b[K")


def test_a_replays_line_moves_without_an_estimate_and_is_priced_by_the_jobs_own_times():
    """A replay is one case no estimate prices: its line counts elapsed time with the time left
    unknown, or priced by the trace where it has every op's own time (the slowest rank's traced
    steps, each time they are replayed, warm-up included)."""
    from orchestrator.execution.replaying import ReplayPlanner
    from workloads.messages import ReplayOp, ReplayProgram

    clock, err = Clock(), io.StringIO()
    line = live.LiveLine(live.Work.unpriced(["r0-g0"], None), err.write, terminal=True, clock=clock)
    clock.now += 7
    line.draw()
    assert err.getvalue().endswith("0/1 groups, 0/1 cases, 7 s elapsed, time left unknown\x1b[K")
    line.work.ended.add("r0-g0")
    assert line.work.left_s(9.0) == 0

    def op(seq: int, traced_us):
        return ReplayOp(0, seq, "0", "all_reduce", "float32", 256, 256, 1024, traced_us=traced_us)

    ops = ((op(0, 1000.0), op(1, 3000.0)), (op(0, 2000.0), op(1, 1000.0)))  # rank 0: 4 ms a step, rank 1: 3
    prog = ReplayProgram(2, 1, (("0", "default", (0, 1)),), ops, warmup_steps=1, repeat=3)
    assert ReplayPlanner(prog).expected_s() == pytest.approx(0.004 * 4)
    untimed = ReplayProgram(2, 1, (("0", "default", (0, 1)),), ((op(0, 1000.0),), (op(0, None),)))
    assert ReplayPlanner(untimed).expected_s() is None
    # --gaps: each op issued at its traced offset from its step's start; the step lasts until its last op ends
    gapped = (dataclasses.replace(op(0, 1000.0), offset_us=0.0), dataclasses.replace(op(1, 500.0), offset_us=6000.0))
    prog = ReplayProgram(1, 1, (("0", "default", (0,)),), (gapped,), gaps=True, warmup_steps=1, repeat=1)
    assert ReplayPlanner(prog).expected_s() == pytest.approx(0.0065 * 2)
    priced = live.Work.unpriced(["r0-g0"], 0.016)
    assert priced.left_s(0.01) == pytest.approx(0.006)
