"""The classic all_reduce benchmark, written correctly: one process per rank, plain
torch.distributed, warm-up, a barrier, a host timer around a loop of blocking calls, the slowest
rank's mean. Rank 0 prints one JSON line per size: {"msg_bytes": S, "time_us": T}."""

import argparse
import json
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--master", required=True, help="IP:PORT of rank 0's store")
    p.add_argument("--sizes", required=True, help="comma-separated byte sizes")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    a = p.parse_args()
    host, port = a.master.rsplit(":", 1)
    store = dist.TCPStore(host, int(port), a.world, a.rank == 0, timeout=timedelta(seconds=120))
    dist.init_process_group("gloo", store=store, rank=a.rank, world_size=a.world)
    for size in map(int, a.sizes.split(",")):
        t = torch.ones(size // 4, dtype=torch.float32)
        for _ in range(a.warmup):
            dist.all_reduce(t)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(a.iters):
            dist.all_reduce(t)
        elapsed = torch.tensor([(time.perf_counter() - t0) / a.iters * 1e6], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        if a.rank == 0:
            print(json.dumps({"msg_bytes": size, "time_us": elapsed.item()}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
