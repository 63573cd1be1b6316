"""`collbench replay` and `predict --trace` against a real training job's own communication time,
on the lab (root): per mode (DDP, FSDP) and node count, train benchmarks/fr_train.py with one rank
per lab node over the shaped links (Flight Recorder on), sweep the cluster, replay the job's
dumps, price them from the sweep's fits, and print the three per-step figures with the ratios.

    python benchmarks/replay_validation.py                       # ddp,fsdp on 2 and 4 nodes, 400mbit
    python benchmarks/replay_validation.py --nodes 2 --modes ddp --json

The job's figure: the median over its steps (the first two left out: DDP builds its buckets in the
first, and both warm up) of the sum of its collectives' times, each collective waited on where it
is issued after the ranks lined up (fr_train.py), at the slowest rank's time. Replay and predict
are given the job's collectives per step (--ops-per-step). Replay: the median step of
`collbench replay` (back to back). Predict:
the median step of `predict --trace` from a sweep of the same collectives over sizes around the
traced ones, with the robust fit rule.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from benchmarks.fidelity import netns_ifname  # noqa: E402
from orchestrator.lab import cluster as labmod  # noqa: E402
from orchestrator.lab.raynodes import free_port  # noqa: E402
from orchestrator.sweep import trace  # noqa: E402

TIMEOUT_S = 600


def train(st, mode: str, out: str, steps: int, layers: int, width: int) -> tuple[float, int]:
    """Run the job on every lab node; its median step communication time (ms), and its
    collectives per step."""
    port = free_port()
    procs = []
    for rank, ns in enumerate(st.namespaces):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(st.nodes), "MASTER_ADDR": st.node_ip(0),
               "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": netns_ifname(ns, st.node_ip(rank))}
        cmd = ["ip", "netns", "exec", ns, sys.executable, os.path.join(HERE, "fr_train.py"), mode, out,
               "--steps", str(steps), "--layers", str(layers), "--width", str(width)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=TIMEOUT_S)
        if p.returncode:
            raise RuntimeError(f"the training job failed: {err[-2000:]}")
    per_rank = [json.load(open(f))["op_ms_per_step"] for f in sorted(glob.glob(os.path.join(out, "comm_rank*.json")))]
    # each collective's time as the slowest rank saw it (the ranks lined up before it), summed per step
    steps = [sum(max(r[k][i] for r in per_rank) for i in range(len(per_rank[0][k]))) for k in range(len(per_rank[0]))]
    return statistics.median(steps[2:]), len(per_rank[0][-1])


def cli(args: list[str], env: dict) -> str:
    proc = subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=TIMEOUT_S)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"collbench {' '.join(args)}: exit {proc.returncode}: {proc.stderr[-2000:]}")
    return proc.stdout


def validate(st, mode: str, work: str, steps: int, layers: int, width: int, iters: int) -> dict:
    dumps = os.path.join(work, f"{mode}-{st.nodes}")
    measured, ops_per_step = train(st, mode, dumps, steps, layers, width)
    loaded = trace.load([dumps])
    program, _ = trace.program(loaded, trace.find_steps(loaded.ops[0], ops_per_step), gaps=False)
    stepped = [op for ops in program.ops for op in ops if op.kind != "barrier"]
    sizes, kinds = [op.msg_bytes for op in stepped], sorted({op.kind for op in stepped})  # the sweep: around these
    env = {**os.environ, **st.auth_env()}
    results = os.path.join(work, f"results-{mode}-{st.nodes}")
    where = ["--address", st.address, "--ranks-per-node", "1", "--output", results, "--no-doctor"]
    out = cli(["run", "--collectives", ",".join(kinds), "--patterns", "inter", "-b", str(max(8, min(sizes) // 4)),
               "-e", str(max(sizes) * 4), "-f", "2", "-n", str(iters), "-c", "0", *where], env)
    sweep_run = re.search(r"collbench: run (\S+)", out).group(1)
    per_step = ["--ops-per-step", str(ops_per_step)]  # the job says how many collectives a step issues
    summaries = {}
    for how in ("back-to-back", "gaps"):
        out = cli(["replay", dumps, "--trace-ranks-per-node", "1", "--repeat", "3", *per_step, *where,
                   *(["--gaps"] if how == "gaps" else [])], env)
        replay_run = re.search(r"collbench: run (\S+)", out).group(1)
        pred = json.loads(cli(["predict", results, "--run", sweep_run, "--trace", dumps, "--ranks-per-node", "1",
                               "--replay-run", replay_run, *per_step, "--format", "json"], env))["tables"]
        summaries[how] = pred["summary"][0]
    s, g = summaries["back-to-back"], summaries["gaps"]
    return {"mode": mode, "nodes": st.nodes, "link": st.link, "ops_per_step": ops_per_step,
            "measured_ms": measured, "replay_ms": s.get("replayed_ms_per_step"),
            "replay_gaps_ms": g.get("replayed_ms_per_step"),
            "predict_ms": s.get("predicted_ms_per_step"), "complete": s.get("complete"),
            "fits": sorted({t["fit"] for t in pred["terms"]}),
            "replay/measured": (s.get("replayed_ms_per_step") or 0) / measured,
            "replay_gaps/measured": (g.get("replayed_ms_per_step") or 0) / measured,
            "predict/measured": (s.get("predicted_ms_per_step") or 0) / measured}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", default="2,4", help="node counts, comma-separated (default: 2,4)")
    p.add_argument("--modes", default="ddp,fsdp", help="ddp, fsdp or both (default: both)")
    p.add_argument("--link", default="400mbit", help="each lab node's link rate (default: 400mbit)")
    p.add_argument("--steps", type=int, default=10, help="training steps (default: 10)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--iters", type=int, default=5, help="timed iterations per size of the sweep (default: 5)")
    p.add_argument("--subnet", default="10.217.0.0/24")
    p.add_argument("--json", action="store_true", help="one JSON object per line instead of a table")
    a = p.parse_args()
    work = tempfile.mkdtemp(prefix="cbreplay")
    rows = []
    for n in map(int, a.nodes.split(",")):
        st = labmod.up(f"rv{n}", n, 1, a.link, a.subnet)
        try:
            for mode in a.modes.split(","):
                row = validate(st, mode, work, a.steps, a.layers, a.width, a.iters)
                rows.append(row)
                print(json.dumps(row) if a.json else f"{mode}: done on {n} nodes", flush=True,
                      file=sys.stdout if a.json else sys.stderr)
        finally:
            labmod.down(st)
    if not a.json:
        print(f"{'mode':<5} {'nodes':>5} {'link':>8} {'job_ms':>8} {'replay_ms':>10} {'ratio':>6} {'gaps_ms':>8} "
              f"{'ratio':>6} {'predict_ms':>11} {'ratio':>6}")
        for r in rows:
            print(f"{r['mode']:<5} {r['nodes']:>5} {r['link']:>8} {r['measured_ms']:8.1f} {r['replay_ms'] or 0:10.1f} "
                  f"{r['replay/measured']:6.2f} {r['replay_gaps_ms'] or 0:8.1f} {r['replay_gaps/measured']:6.2f} "
                  f"{r['predict_ms'] or 0:11.1f} {r['predict/measured']:6.2f}")


if __name__ == "__main__":
    main()
