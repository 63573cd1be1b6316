"""A real training job for validating `collbench replay` and `predict --trace`: a small MLP
(built here, no downloads) trained with DDP (gradient buckets) or FSDP (fully_shard per layer)
on gloo, Flight Recorder on. Run one process per rank (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT in the environment); each writes its Flight Recorder dump to OUT/fr_rank<rank> and
the time of each of its collectives, step by step, to OUT/comm_rank<rank>.json.

The job's communication time is measured in the job: before each collective DDP's comm hook or
FSDP issues, the ranks line up through the job's store (not a collective: the trace does not see
it), then the collective is issued, waited on and timed there; a step's figure is its
collectives' time without overlap with compute or waits for a late rank: what a back-to-back
replay measures. Usage: python benchmarks/fr_train.py {ddp,fsdp} OUT [--steps N --layers L --width W]
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "20000")  # before torch.distributed makes a group

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402

_spent: list[float] = []  # seconds in collectives during the current step
_arrivals = [0]


def _line_up() -> None:
    """Every rank here before the next collective, through the job's store (no collective, so
    nothing the Flight Recorder records): a collective's time is then its own, not a wait for a
    rank still computing."""
    store = dist.distributed_c10d._get_default_store()
    _arrivals[0] += 1
    key = f"line_up/{_arrivals[0]}"
    store.add(key, 1)
    while int(store.add(key, 0)) < dist.get_world_size():
        time.sleep(0.0002)


def _timed(fn):
    def wrapper(*args, async_op: bool = False, **kwargs):
        _line_up()
        t0 = time.perf_counter()
        work = fn(*args, async_op=True, **kwargs)
        work.wait()
        _spent.append(time.perf_counter() - t0)
        return work if async_op else None
    return wrapper


def _ddp_hook(state, bucket):
    buf = bucket.buffer()
    _line_up()
    t0 = time.perf_counter()
    dist.all_reduce(buf, async_op=True).wait()
    _spent.append(time.perf_counter() - t0)
    buf.div_(dist.get_world_size())
    fut = torch.futures.Future()
    fut.set_result(buf)
    return fut


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=("ddp", "fsdp"))
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--bucket-mb", type=float, default=1.0)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(args.width, args.width), nn.ReLU()) for _ in range(args.layers)])
    if args.mode == "ddp":
        net = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb)
        net.register_comm_hook(None, _ddp_hook)
    else:
        from torch.distributed.fsdp import fully_shard

        for name in ("all_gather_single", "all_reduce", "reduce_scatter_single", "all_gather_into_tensor",
                     "reduce_scatter_tensor"):
            if hasattr(dist, name):
                setattr(dist, name, _timed(getattr(dist, name)))
        for layer in model:
            fully_shard(layer)
        fully_shard(model)
        net = model
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    per_step_ms = []
    for _ in range(args.steps):
        _spent.clear()
        x = torch.randn(16, args.width)
        net(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
        per_step_ms.append([t * 1e3 for t in _spent])
        time.sleep(0.05)  # the pause between steps a data loader and logging make
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"comm_rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "world_size": world, "mode": args.mode, "op_ms_per_step": per_step_ms}, f)
    with open(os.path.join(args.out, f"fr_rank{rank}"), "wb") as f:
        f.write(torch._C._distributed_c10d._dump_fr_trace())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
