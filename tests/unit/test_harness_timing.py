"""The harness' timing structure and per-size memory check on the CPU: a fake device clock counts
the marks each pass records, injected free-memory figures stand in for a GPU's, and a one-rank
gloo group runs the real loop."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from orchestrator.errors import UsageError
from orchestrator.sweep.spec import SweepSpec, for_backend
from workloads import clocks, harness, memory, registry
from workloads.messages import Case
from workloads.registry import Ctx

CALL_US, MARK_US = 10, 3  # what one collective and one event record cost on the fake device


class FakeEventClock:
    """A device clock whose marks cost MARK_US each (as a CUDA event record does) and whose
    collective calls cost CALL_US; it counts the marks of each pass."""

    cheap = False

    def __init__(self) -> None:
        self.now_us = 0
        self.marks: list[str] = []  # "mark" or "call", in order

    def markers(self, k: int) -> list:
        return [None] * k

    def record(self, marker) -> int:
        self.now_us += MARK_US
        self.marks.append("mark")
        return self.now_us - MARK_US  # the time at which the mark was placed in the stream

    def call(self) -> None:
        self.now_us += CALL_US
        self.marks.append("call")

    def sync(self) -> None:
        pass

    def elapsed_us(self, start: int, end: int) -> float:
        return float(end - start)


def test_a_device_batch_is_marked_only_at_its_ends():
    clock, barriers = FakeEventClock(), []
    samples, batch_us = clocks.timed(clock.call, 7, clock, barrier=lambda: barriers.append(len(clock.marks)))
    assert samples == [CALL_US + MARK_US] * 7  # each call between its own two marks (the end mark's cost counts)
    assert batch_us == CALL_US + MARK_US / 7  # two marks for the whole batch: within one mark of the call itself
    first_pass, second_pass = clock.marks[:21], clock.marks[21:]
    assert first_pass == ["mark", "call", "mark"] * 7
    assert second_pass == ["mark"] + ["call"] * 7 + ["mark"]  # nccl-tests' structure
    assert barriers == [21]  # the group is synchronised between the passes


def test_a_graph_batch_is_one_replay_between_two_marks():
    clock = FakeEventClock()

    class Graph:
        replays = 0

        def replay(self) -> None:  # the captured batch: 7 calls, one launch
            self.replays += 1
            for _ in range(7):
                clock.call()

    graph = Graph()
    _, batch_us = clocks.timed(clock.call, 7, clock, captured=graph)
    assert graph.replays == 1 and clock.marks[21:] == ["mark"] + ["call"] * 7 + ["mark"]
    assert batch_us == CALL_US + MARK_US / 7


def test_on_the_host_clock_one_pass_gives_both():
    class HostFake(FakeEventClock):
        cheap = True

    clock = HostFake()
    samples, batch_us = clocks.timed(clock.call, 5, clock)
    assert clock.marks == ["mark", "call", "mark"] * 5  # no second pass on the CPU
    assert samples == [CALL_US + MARK_US] * 5
    assert batch_us == (5 * (CALL_US + 2 * MARK_US) - MARK_US) / 5  # first start to last end


def test_the_floor_is_the_same_loop_dispatching_nothing():
    floor = clocks.batch_floor_us(torch.device("cpu"), iters=200)
    assert 0 < floor < 1e4  # a Python call per iteration: far under any collective


@pytest.fixture(scope="module")
def one_rank_group():
    dist.init_process_group("gloo", store=dist.TCPStore("127.0.0.1", 0, 1, True), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _case(counts: tuple[int, ...], collective: str = "all_reduce") -> Case:
    return Case(collective, "float32", "sum" if collective == "all_reduce" else "none", True, counts,
                iters=3, warmup=1, check_iters=1)


def test_a_size_that_does_not_fit_fails_with_the_numbers_and_the_group_goes_on(one_rank_group, monkeypatch):
    cpu = torch.device("cpu")
    free = {"bytes": 50_000}
    monkeypatch.setattr(harness, "free_bytes", lambda device: free["bytes"])  # as a GPU would report
    monkeypatch.setattr(harness, "nccl_headroom_bytes", lambda device: 10_000)
    small, big = 256, 64_000  # elements of float32: 1 KiB fits, 256 KB does not
    samples = harness.run_case(_case((small, big)), 0, 1, cpu)
    assert samples[0].error is None and samples[0].n_wrong == 0 and len(samples[0].iter_time_us) == 3
    need = memory.peak_bytes(registry.get("all_reduce"), Ctx(0, 1, big, "float32", "sum", 0, True), "gloo", True)
    # the buffer, a mask byte per element compared, and 9 bytes per element to count a mismatching mask
    assert need == big * 4 + big + 9 * big
    assert samples[1].iter_time_us == () and samples[1].error == (
        f"needs {need} bytes of buffers and check on cpu, 50000 bytes free there after the CUDA context and "
        "NCCL's buffers; 10000 more are kept for what NCCL connects on first use")
    # the next case of the same group runs: nothing was left half-done by the refused size
    free["bytes"] = 10 << 20
    (again,) = harness.run_case(_case((big,)), 0, 1, cpu)
    assert again.error is None and again.n_wrong == 0


def test_without_a_measurement_nothing_is_refused_in_advance(one_rank_group):
    assert harness.free_bytes(torch.device("cpu")) is None
    assert harness.memory_problem(1 << 60, torch.device("cpu")) is None  # the allocation itself would say


def test_the_headroom_follows_the_gpu_generation(monkeypatch):
    gpu = torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: (9, 0))
    assert harness.nccl_headroom_bytes(gpu) == 2 << 30  # NVLS buffers possible
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: (8, 0))
    assert harness.nccl_headroom_bytes(gpu) == 512 << 20


def test_a_batch_that_cannot_be_captured_fails_its_size_on_every_rank(one_rank_group):
    """No CUDA here: capture fails as it would for a collective CUDA cannot capture; every rank agrees
    and the size is a failed sample with the reason, not a hang."""
    case = Case("all_reduce", "float32", "sum", True, (64,), iters=3, warmup=1, check_iters=1, cuda_graph=True)
    (sample,) = harness.run_case(case, 0, 1, torch.device("cpu"))
    assert sample.iter_time_us == () and sample.error.startswith("--cuda-graph: the batch could not be captured")


def test_cuda_graph_is_refused_without_nccl():
    with pytest.raises(UsageError, match=r"^--cuda-graph: needs --backend nccl"):
        SweepSpec(backend="gloo", cuda_graph=True)
    with pytest.raises(UsageError, match=r"^--cuda-graph: the cluster runs gloo"):
        for_backend(SweepSpec(cuda_graph=True), "gloo")
    assert for_backend(SweepSpec(cuda_graph=True), "nccl").cuda_graph
