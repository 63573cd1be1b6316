"""Fidelity of collbench's numbers: its 2-rank all_reduce against the plain torch.distributed
script (benchmarks/plain_allreduce.py), same backend, sizes and iterations, alternating in one run.

    python benchmarks/fidelity.py                 # on the embedded (local) instance
    python benchmarks/fidelity.py --lab 1gbit     # across the lab's shaped inter-node link (root)

Prints, per size, the median over --repeat alternations of each side's time and their ratio;
with --lab also the busbw as a fraction of the link rate.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from orchestrator.lab import cluster as labmod  # noqa: E402
from orchestrator.lab.raynodes import free_port  # noqa: E402
from orchestrator.sweep.sizes import format_bytes, parse_bytes, sweep  # noqa: E402


def plain(sizes: list[int], iters: int, warmup: int, netns: list[str] | None, ips: list[str]) -> dict[int, float]:
    master = f"{ips[0]}:{free_port()}"
    procs = []
    for rank in range(2):
        cmd = [sys.executable, os.path.join(HERE, "plain_allreduce.py"), "--rank", str(rank), "--master", master,
               "--sizes", ",".join(map(str, sizes)), "--iters", str(iters), "--warmup", str(warmup)]
        env = dict(os.environ)
        if netns:
            cmd = ["ip", "netns", "exec", netns[rank], *cmd]
            env["GLOO_SOCKET_IFNAME"] = netns_ifname(netns[rank], ips[rank])
        else:
            env["GLOO_SOCKET_IFNAME"] = "lo"
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env))
    out, _ = procs[0].communicate(timeout=1800)
    procs[1].wait(timeout=60)
    return {r["msg_bytes"]: r["time_us"] for r in map(json.loads, out.splitlines())}


def netns_ifname(ns: str, ip: str) -> str:
    from workloads.comm_env import interface_for_ip

    listing = subprocess.run(["ip", "-n", ns, "-o", "-4", "addr"], capture_output=True, text=True).stdout
    return interface_for_ip(ip, listing)


def collbench(sizes: list[int], iters: int, warmup: int, st) -> pd.DataFrame:
    out = tempfile.mkdtemp(prefix="cbfid")
    cmd = [sys.executable, "-m", "orchestrator", "run", "--collectives", "all_reduce", "-b", str(sizes[0]),
           "-e", str(sizes[-1]), "-f", str(sizes[1] // sizes[0]), "-n", str(iters), "-w", str(warmup), "-c", "0",
           "--output", out]
    if st:
        cmd += ["--address", st.address, "--ranks-per-node", "1", "--patterns", "inter"]
    env = {**os.environ, **(st.auth_env() if st else {})}
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env, cwd=os.path.dirname(HERE))
    return pd.read_parquet(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-b", default="16")
    p.add_argument("-e", default="64M")
    p.add_argument("-f", type=int, default=4)
    p.add_argument("-n", type=int, default=20)
    p.add_argument("-w", type=int, default=5)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--lab", metavar="RATE", help="build a 2-node lab with this link rate and measure across it")
    a = p.parse_args()
    sizes = sweep(parse_bytes(a.b), parse_bytes(a.e), a.f)
    st = None
    if a.lab:
        st = labmod.up("fid", 2, 1, a.lab, "10.216.0.0/24")
    try:
        netns = st.namespaces if st else None
        ips = [st.node_ip(0), st.node_ip(1)] if st else ["127.0.0.1", "127.0.0.1"]
        plain_t, cb_t, cb_bw = {s: [] for s in sizes}, {s: [] for s in sizes}, {s: [] for s in sizes}
        for rep in range(a.repeat):
            for s, t in plain(sizes, a.n, a.w, netns, ips).items():
                plain_t[s].append(t)
            df = collbench(sizes, a.n, a.w, st)
            for _, row in df.iterrows():
                cb_t[row.msg_bytes].append(row.time_us)
                cb_bw[row.msg_bytes].append(row.busbw_gbps)
            print(f"repeat {rep + 1}/{a.repeat} done", file=sys.stderr, flush=True)
        rate = labmod.link_rate_bps(a.lab) / 8e9 if a.lab else None
        print(f"{'msg_bytes':>10} {'plain_us':>11} {'collbench_us':>13} {'ratio':>7} {'busbw_GBps':>11}"
              + ("  busbw/link" if rate else ""))
        for s in sizes:
            pt, ct, bw = statistics.median(plain_t[s]), statistics.median(cb_t[s]), statistics.median(cb_bw[s])
            line = f"{format_bytes(s):>10} {pt:11.1f} {ct:13.1f} {ct / pt:7.3f} {bw:11.4f}"
            if rate:
                line += f"  {bw / rate:10.3f}"
            print(line)
    finally:
        if st:
            labmod.down(st)


if __name__ == "__main__":
    main()
