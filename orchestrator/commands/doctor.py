"""`collbench doctor`: every node checked at once for what makes collectives fail, hang or lie
before anything is measured (execution.doctor). Exit 0 when nothing fails, 1 when something
does, 2 for bad input."""

from __future__ import annotations

import argparse
import json
import sys

from orchestrator.commands.options import add_spec_options, spec_from_args
from orchestrator.commands.render import on_screen, render_junit, render_tables
from orchestrator.operations.doctor import SWEEPS, CheckStatus, doctor


def add_parser(sub) -> None:
    p = sub.add_parser(
        "doctor",
        help="check every node for the classic misconfigurations (versions, ports, MTU, /dev/shm, GPUs, NICs)",
        description="One short agent per node, all at once, no GPU work and no collective: the same Python, "
        "torch, NCCL (the library torch loads), driver, collbench and Ray everywhere; NCCL_*, FI_*, UCX_* alike; "
        "every node reachable on ephemeral ports as NCCL's and gloo's sockets need; the MTU of the collectives' "
        "interface alike and the interface NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME name present; /dev/shm, "
        "ulimit -l, /dev/infiniband; and where present the GPUs (count in Ray, MIG, persistence, ECC, row remaps, "
        "clocks held down, NVLink links, PCIe width and speed), the RDMA NICs (port state, rate, PCIe link), "
        "GPU-NIC affinity and GPUDirect RDMA, RoCE ports' GIDs; PCIe ACS redirecting P2P and the IOMMU translating "
        "DMA; multi-node NVLink readiness (fabric registration, IMEX channel, one clique per fabric); the odd node out "
        "(GPU count and model, RDMA NICs and their rates, CUDA, kernel, NIC firmware against the majority); and the "
        "NCCL settings known to cost bandwidth, hang or corrupt results (each node's own, with --env on top). "
        "Exit 0 when nothing fails, 1 when something does, 2 for bad input.",
    )
    add_spec_options(p, only=SWEEPS.fields)
    p.add_argument("--format", choices=("table", "json", "junit"), default="table",
                   help='checks as tables; JSON: {"cluster": [checks], "nodes": [{"node", "host", "checks": '
                   '[{"name", "status", "detail", "hint"}]}]}; or JUnit XML for CI systems: one test case per node '
                   'and check (class `cluster` or the node\'s host (IP)), fail a <failure>, skip <skipped>, warn '
                   'a pass with its words in <system-out> (default: table)')
    p.add_argument("--all", action="store_true", help="list every check of every node, the ones that passed or had "
                   "nothing to read (skip) too (default: the warnings and failures, and the cluster's checks)")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    found = doctor(spec_from_args(args))
    if args.format == "json":
        print(json.dumps(found.to_json(), indent=1))
    elif args.format == "junit":
        cases = [("cluster", c) for c in found.cluster] + [(f"{n['host']} ({n['node']})", c) for n in found.nodes
                                                           for c in n["checks"]]
        print(render_junit("collbench doctor", [{"classname": where, "name": c.name, "status": c.status.value,
                                                 "message": c.detail, "text": c.hint} for where, c in cases]))
    else:
        print(render_tables([("cluster", [c.to_json() for c in found.cluster])], "table", **on_screen(sys.stdout)))
        rows = [{"node": n["node"], "host": n["host"], **c.to_json()} for n in found.nodes for c in n["checks"]
                if args.all or c.status in (CheckStatus.WARN, CheckStatus.FAIL)]
        print(render_tables([("nodes" if args.all else "nodes: what did not pass", rows)], "table",
                            **on_screen(sys.stdout)))
    status = found.status
    print(f"collbench: doctor: {len(found.nodes)} node(s) in {found.wall_s:.1f}s: {status}", file=sys.stderr)
    return 1 if status is CheckStatus.FAIL else 0
