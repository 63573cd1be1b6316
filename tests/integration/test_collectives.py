"""Every collective's exact output on every rank, for 2 and 3 (odd) gloo ranks, every dtype gloo
supports, every op, in-place and out-of-place. The expected tensors are computed here from the
inputs each rank really sent, independently of the modules' own `expected()`."""

from __future__ import annotations

import functools
import io

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from orchestrator.lab.raynodes import free_port
from orchestrator.sweep import traffic as tv
from workloads import harness, registry, traffic
from workloads.data import SENTINEL, TORCH_DTYPES, count_wrong, write
from workloads.dtypes import BACKEND_DTYPES, NO_OP, OPS
from workloads.harness import buffers, fill, run_case
from workloads.messages import Case
from workloads.registry import Collective, Ctx

COUNT = 24  # splits by 2 and 3
DTYPES = sorted(BACKEND_DTYPES["gloo"])


def _cases():
    for name in registry.names():
        coll = registry.get(name)
        for dtype in DTYPES:
            for op in OPS if coll.reduces else (NO_OP,):
                for in_place in coll.in_place_modes:
                    yield name, dtype, op, in_place


def _worker(rank: int, n: int, port: int, queue) -> None:
    store = dist.TCPStore("127.0.0.1", port, n, rank == 0)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=n)
    out = {}
    for name, dtype, op, in_place in _cases():
        coll = registry.get(name)
        if n < coll.min_ranks:
            continue
        c = Ctx(rank, n, COUNT, dtype, op, 1 % n, in_place)
        send, recv = buffers(coll, c, torch.device("cpu"))
        fill(coll, c, send, recv, it=3)
        sent = send.clone()
        coll.bind(c, send, recv, _OPS[op] if op != NO_OP else None)()
        spans = coll.expected(c)
        own, own_wrong = None, None
        if spans is not None:  # what the module says the output is, written out in full
            own = torch.full_like(recv, SENTINEL)
            write(own, spans, n, 3, op, dtype)
            own_wrong = count_wrong(recv, spans, n, 3, op, dtype)
        out[(name, dtype, op, in_place)] = (sent, recv.clone(), own, own_wrong)
    # A collective that never communicates must be caught by the harness' check.
    broken = Case("all_reduce", "float32", "sum", True, (COUNT,), iters=1, warmup=0, check_iters=2)
    real_bind = registry.REGISTRY["all_reduce"].bind
    registry.REGISTRY["all_reduce"].bind = lambda *a: (lambda: None)
    out["broken_n_wrong"] = run_case(broken, rank, n, torch.device("cpu"))[0].n_wrong
    registry.REGISTRY["all_reduce"].bind = real_bind
    # A size that does not fit on the last rank: every rank skips it, the next size still runs.
    sizes = Case("all_reduce", "float32", "sum", True, (COUNT, 2 * COUNT, 3 * COUNT), iters=2, warmup=1, check_iters=1)
    real_buffers = harness.buffers

    def short_of_memory(coll, c, device):
        if c.count == 2 * COUNT and rank == n - 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 192.00 B")
        return real_buffers(coll, c, device)

    harness.buffers = short_of_memory
    out["oom"] = run_case(sizes, rank, n, torch.device("cpu"))
    harness.buffers = real_buffers
    queue.put((rank, _bytes(out)))
    dist.barrier()
    dist.destroy_process_group()


_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN, "prod": dist.ReduceOp.PRODUCT}


@functools.lru_cache(maxsize=None)
def _results(n: int) -> dict[int, dict]:
    return _spawn(_worker, n)


def _spawn(worker, n: int) -> dict[int, dict]:
    """Each rank's results of `worker` run by n gloo processes on this machine."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, n, port, queue)) for r in range(n)]
    for p in procs:
        p.start()
    results = {}
    for _ in range(n):
        rank, data = queue.get(timeout=240)
        results[rank] = torch.load(io.BytesIO(data), weights_only=False)  # our own child process wrote it
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return results


def _combine(op: str, tensors: list[torch.Tensor]) -> torch.Tensor:
    acc = tensors[0].double() if tensors[0].is_floating_point() else tensors[0].long()
    for t in tensors[1:]:
        t = t.double() if t.is_floating_point() else t.long()
        acc = {"sum": acc + t, "prod": acc * t, "max": torch.maximum(acc, t), "min": torch.minimum(acc, t)}[op]
    return acc.to(tensors[0].dtype)


def _expected(name: str, op: str, sent: list[torch.Tensor], rank: int, n: int, root: int) -> torch.Tensor | None:
    chunk = COUNT // n
    if name == "all_reduce":
        return _combine(op, sent)
    if name == "reduce":
        return _combine(op, sent) if rank == root else None
    if name == "reduce_scatter":
        return _combine(op, sent)[rank * chunk : (rank + 1) * chunk]
    if name == "all_gather":
        return torch.cat(sent)
    if name == "all_to_all":
        return torch.cat([s[rank * chunk : (rank + 1) * chunk] for s in sent])
    if name == "all_to_allv":  # nccl-tests' generated pattern: cell i,j from the matrix, in sender order
        cells = traffic.counts(traffic.generated(n), COUNT)
        return torch.cat([sent[i][sum(cells[i][:rank]) : sum(cells[i][: rank + 1])] for i in range(n)])
    if name == "broadcast":
        return sent[root]
    if name == "send_recv":
        return sent[(rank - 1) % n]
    raise AssertionError(name)


@pytest.mark.parametrize("n", [2, 3])
def test_every_collective_exact_on_every_rank(n):
    results = _results(n)
    checked = 0
    for key in _cases():
        name, dtype, op, in_place = key
        if n < registry.get(name).min_ranks:
            continue
        sent = [results[r][key][0] for r in range(n)]
        for rank in range(n):
            _, got, own, own_wrong = results[rank][key]
            want = _expected(name, op, sent, rank, n, root=1 % n)
            assert got.dtype == TORCH_DTYPES[dtype]
            if want is None:
                assert own is None
                continue
            assert torch.equal(got, want), f"{key} rank {rank}: {got} != {want}"
            assert torch.equal(own, want), f"{key} rank {rank}: module's expected() is wrong"
            assert own_wrong == 0, f"{key} rank {rank}: the check counted {own_wrong} wrong elements of a right result"
            checked += 1
    assert checked == n * sum(1 for k in _cases() if n >= registry.get(k[0]).min_ranks) - (n - 1) * sum(
        1 for k in _cases() if k[0] == "reduce"
    )


def test_harness_counts_wrong_elements_of_a_broken_collective():
    results = _results(2)
    # all_reduce that does nothing: every element differs from the 2-rank sum where the
    # rank's own input differs from it; over two check iterations that is most elements.
    assert all(results[r]["broken_n_wrong"] > COUNT for r in range(2))


@pytest.mark.parametrize("n", [2, 3])
def test_a_size_that_does_not_fit_is_skipped_by_every_rank(n):
    results = _results(n)
    for rank in range(n):
        first, skipped, last = results[rank]["oom"]
        assert len(first.iter_time_us) == 2 and first.n_wrong == 0 and first.error is None
        assert skipped.count == 2 * COUNT and skipped.iter_time_us == () and skipped.n_wrong == 0
        assert len(last.iter_time_us) == 2 and last.n_wrong == 0 and last.batch_us > 0
        if rank == n - 1:
            assert skipped.error.startswith("out of memory for 192 bytes of buffers (CUDA out of memory.")
        else:
            assert skipped.error is None  # it was told by the agreement, not by its own allocation


def test_registering_an_incomplete_or_unlisted_collective_fails():
    class NoCheck(Collective):  # no expected(): its results could never be checked
        name = "all_reduce"

        @staticmethod
        def busbw_factor(n):
            return 1.0

        def inputs(self, c):
            return []

        def bind(self, c, send, recv, op):
            return lambda: None

    with pytest.raises(TypeError, match="expected"):
        registry.register(NoCheck)

    class Unlisted(NoCheck):
        name = "gather"

        def expected(self, c):
            return None

    with pytest.raises(ValueError, match="'gather' is not in registry.COLLECTIVES"):
        registry.register(Unlisted)
    assert type(registry.get("all_reduce")).__name__ == "AllReduce"  # nothing was replaced


MATRICES = {  # group of 3: a router's skewed traffic, and a file's with empty cells and a busy diagonal
    "moe": lambda: tv.parse("moe:experts=6,topk=2,skew=1.5,seed=7").for_ranks(3),
    "sparse": lambda: ((5, 0, 1), (0, 0, 7), (3, 0, 2)),
}
V_COUNT = 40  # the busiest rank's elements


def _v_worker(rank: int, n: int, port: int, queue) -> None:
    store = dist.TCPStore("127.0.0.1", port, n, rank == 0)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=n)
    out = {}
    coll = registry.get("all_to_allv")
    for key, make in MATRICES.items():
        c = Ctx(rank, n, V_COUNT, "float32", NO_OP, 0, False, traffic=make())
        send, recv = buffers(coll, c, torch.device("cpu"))
        fill(coll, c, send, recv, it=2)
        sent = send.clone()
        coll.bind(c, send, recv, None)()
        out[key] = (sent, recv.clone(), count_wrong(recv, coll.expected(c), n, 2, NO_OP, "float32"))
        # every chunk one element off its place (as a wrong offset would put it): the check must see it
        misplaced = torch.roll(recv, 1)
        out[key + "-misplaced"] = count_wrong(misplaced, coll.expected(c), n, 2, NO_OP, "float32")
    queue.put((rank, _bytes(out)))
    dist.barrier()
    dist.destroy_process_group()


def _bytes(out) -> bytes:
    """Plain bytes: tensors in shared memory die with the process that made them."""
    buf = io.BytesIO()
    torch.save(out, buf)
    return buf.getvalue()


def test_all_to_allv_delivers_every_cell_of_an_uneven_matrix_and_its_check_catches_misplaced_chunks():
    n = 3
    results = _spawn(_v_worker, n)
    for key, make in MATRICES.items():
        m = make()
        cells = traffic.counts(m, V_COUNT)
        assert traffic.busiest_numel(m, V_COUNT) <= V_COUNT
        sent = [results[r][key][0] for r in range(n)]
        for rank in range(n):
            _, got, wrong = results[rank][key]
            # what each sender put at this rank's place in its input, in sender order
            want = torch.cat([sent[i][sum(cells[i][:rank]): sum(cells[i][: rank + 1])] for i in range(n)])
            assert torch.equal(got, want) and wrong == 0, (key, rank)
            assert len(got) == sum(cells[i][rank] for i in range(n))
            if len(got) > 1:  # a shifted buffer is caught
                assert results[rank][key + "-misplaced"] > 0, (key, rank)
