"""`collbench attach` (issue 60) on Flight Recorder dumps of real jobs (4 gloo ranks on this host,
tests/fixtures/flight_recorder/make_attach_fixtures.py: healthy; rank 2 sleeping 50 ms before each
gradient all_reduce; rank 3 stopping after step 20) and on simulated jobs of 4 to 64 ranks
(benchmarks/attach_errors.py: the host's measured arrival noise, culprits, clock skew)."""

from __future__ import annotations

import json
import os
import shutil
import statistics
from pathlib import Path

import pytest

from benchmarks.attach_errors import rates
from orchestrator.analysis import attach
from orchestrator.errors import UsageError
from orchestrator.operations.attach import AttachOptions
from orchestrator.operations.attach import attach as look_at
from orchestrator.sweep.dumps import load
from tests.helpers import run_main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "flight_recorder"


def _job(name: str) -> str:
    return str(FIXTURES / f"attach_{name}")


def test_the_rank_everyone_waits_for_is_named_though_its_collectives_look_fastest():
    a = attach.judge(load([_job("straggler")], every_rank=False))
    (s,) = a.stragglers
    assert s.rank == 2 and s.op.startswith("all_reduce of 65536 bytes") and a.hang is None
    assert 40 <= s.late_ms <= 80 and s.last == 30 and s.judged == 30  # slept 50 ms before each of 30
    # side by side, what a per-rank timer saw: the culprit's all_reduce is the shortest, the others
    # wait ~50 ms for it in theirs; durations point at the wrong ranks
    times = {r: statistics.median(json.loads((FIXTURES / "attach_straggler" / f"times_rank{r}.json").read_text())
                                  ["all_reduce_s"]) for r in range(4)}
    assert min(times, key=times.get) == 2 and all(times[r] > 0.03 for r in (0, 1, 3)), times
    assert attach.judge(load([_job("healthy")], every_rank=False)).named is False


def test_a_hang_names_the_rank_that_never_arrived_and_how_long_the_others_waited(tmp_path):
    job = tmp_path / "hang"
    shutil.copytree(_job("hang"), job)
    trace = load([str(job)], every_rank=False)
    entered_ns = max(o.created_ns for o in trace.ops[0])  # when rank 0 entered the collective it waits in
    for r in range(4):  # each dump written 5 s after that (its file's time is the dump's)
        os.utime(job / f"fr_rank{r}", ns=(entered_ns + 5 * 10**9,) * 2)
    hang = attach.judge(load([str(job)], every_rank=False), hang_after_s=2.0).hang
    assert (hang.missing, hang.entered, hang.seq, hang.op, hang.msg_bytes) == ((3,), (0, 1, 2), 41, "all_reduce",
                                                                             65536)
    assert 4.5 <= hang.waited_s <= 5.0 and hang.line().startswith("hang: rank(s) 3 never reached collective 41")
    # younger than --hang-after: a job in flight, not a hang
    assert attach.judge(load([str(job)], every_rank=False), hang_after_s=30.0).hang is None


def test_a_missing_dump_is_said_and_the_others_still_judged(tmp_path):
    """A rank between others without a dump is said (the highest rank's absence cannot be seen: the
    world size is read from the dumps' names)."""
    job = tmp_path / "three"
    shutil.copytree(_job("straggler"), job)
    (job / "fr_rank1").unlink()
    a = attach.judge(load([str(job)], every_rank=False))
    assert a.limits[0].startswith("rank(s) 1: no dump") and a.stragglers == ()  # no collective held by every rank
    assert any("too few to judge stragglers" in line for line in a.limits)


@pytest.mark.parametrize("ranks, steps, late, skew, completions, named_all", [
    (4, 30, [], 0.0, False, None),
    (64, 100, [], 0.0, False, None),
    (16, 100, [], 2.0, False, None),  # NTP-sized clock offsets: under --min-late, no name
    (4, 30, [50.0], 0.0, False, True),
    (64, 100, [10.0], 0.0, False, True),  # a large group: last only now and then, late every time
    (16, 100, [20.0, 20.0], 0.0, False, True),  # two at once: both
    (16, 100, [20.0], 30.0, True, True),  # clocks 30 ms apart, aligned by completions
    (16, 100, [], 30.0, True, None),
])
def test_error_rates_on_simulated_jobs(ranks, steps, late, skew, completions, named_all):
    got = rates(ranks, steps, late, skew, jobs=20, seed=7, completions=completions)
    assert got["false_positive"] == 0.0, got
    if named_all:
        assert got["false_negative"] == 0.0, got


def test_clocks_far_apart_without_completion_times_are_a_stated_limit():
    """Skews of 10 ms with nothing to align them by name healthy ranks: the clocks line says the
    dumps had no completion times, and what to set (docs: attach's limits)."""
    assert rates(16, 100, [], 10.0, jobs=10, seed=7)["false_positive"] > 0.5
    assert "no completion times" in attach.judge(load([_job("healthy")], every_rank=False)).clocks


def test_the_command_exits_by_what_it_named_and_refuses_bad_input(tmp_path):
    healthy, straggler = run_main(["attach", _job("healthy")]), run_main(["attach", _job("straggler"),
                                                                          "--hosts", "nodeA,nodeB"])
    assert (healthy.returncode, straggler.returncode) == (0, 1)
    assert healthy.stdout.strip() == "nothing named: no hang, no chronic straggler"
    assert "cannot see: hosts: a dump does not say where its rank ran" in healthy.stderr
    assert straggler.stdout.startswith("straggler: rank 2 arrives a median ") and "(rank 2 on nodeB)" in straggler.stdout
    said = json.loads(run_main(["attach", _job("straggler"), "--format", "json"]).stdout)
    assert said["stragglers"][0]["rank"] == 2 and said["hang"] is None and said["ranks"] == 4
    bad = run_main(["attach", _job("healthy"), "--hang-after", "soon"])
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "--hang-after" in bad.stderr
    assert run_main(["attach", str(tmp_path)]).returncode == 2  # no dump in it
    # --every: looks again until --for has passed (nothing named), then exits 0
    again = run_main(["attach", _job("healthy"), "--every", "0.2s", "--for", "0.5s", "--format", "json"])
    assert again.returncode == 0 and len(again.stdout.strip().splitlines()) >= 2


def test_the_operation_maps_ranks_to_hosts_by_node_blocks():
    look = look_at(AttachOptions((_job("straggler"),), hosts=("gpu-1", "gpu-2")))
    assert look.hosts == ("gpu-1", "gpu-1", "gpu-2", "gpu-2") and look.where(2) == "rank 2 on gpu-2"


def test_looking_again_waits_for_dumps_that_are_not_there_yet(tmp_path):
    """Issue 60: with --every, a folder the job has not written into yet (or a dump caught half
    written) is nothing to read yet, not an error, until --for has passed; once, it is refused."""
    from orchestrator.operations.attach import looks

    empty = tmp_path / "fr"
    empty.mkdir()
    seen = []
    with pytest.raises(UsageError, match="no Flight Recorder dump"):  # --for passed: refused as a single look is
        for look in looks(AttachOptions((str(empty),), every="0.1s", for_="0.35s")):
            seen.append(look)
    assert len(seen) >= 2 and all(look.waiting and "no Flight Recorder dump" in look.waiting for look in seen)
    said = run_main(["attach", str(empty), "--every", "0.1s", "--for", "0.3s"])
    assert said.returncode == 2 and "nothing to read yet" in said.stderr and said.stderr.strip().splitlines()[-1] \
        .startswith("collbench: error: ")


def test_sends_and_receives_are_not_collectives():
    """A send or recv record carries the last collective's sequence number: left out, it cannot
    move that collective's arrival nor be named as the collective a hang waits in."""
    import dataclasses

    trace = load([_job("straggler")], every_rank=False)
    extra = {r: ops + (dataclasses.replace(ops[-1], name="send", kind=None, p2p=True, created_ns=ops[-1].created_ns
                                            + 10**10),) for r, ops in trace.ops.items() if r == 0}
    mixed = dataclasses.replace(trace, ops={**trace.ops, **extra})
    (s,) = attach.judge(mixed).stragglers
    assert s.rank == 2
