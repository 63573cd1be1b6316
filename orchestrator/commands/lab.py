"""`collbench lab up|down|exec`: a real multi-node Ray cluster on this machine (root, Linux)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from orchestrator.errors import UsageError, renamed
from orchestrator.operations import lab


def add_parser(sub) -> None:
    p = sub.add_parser(
        "lab",
        help="build or remove a multi-node Ray cluster on this machine (network namespaces, shaped links)",
        description="A real Ray cluster of N nodes on one Linux machine: one network namespace per node "
        "joined by a bridge, links shaped with tc tbf, token authentication. Needs root and iproute2.",
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True, parser_class=type(p))
    u = verbs.add_parser("up", help="build the lab and print how to run against it")
    u.add_argument("--nodes", type=int, default=2, help="nodes, one network namespace each (default: 2)")
    u.add_argument("--cpus-per-node", type=int, default=None,
                   help="CPUs each node advertises to Ray: a run's CPU ranks per node (default: 2)")
    u.add_argument("--ranks-per-node", type=int, default=None, dest="old_cpus_per_node",
                   help="the old name of --cpus-per-node, taken until the next release")
    u.add_argument("--link", default="1gbit", help="rate of every node's link, tc units: 400mbit, 1gbit (default: 1gbit)")
    u.add_argument("--node-link", action="append", metavar="NODE=RATE",
                   help="give node NODE (0-based) its own link rate, a planted slow link: 1=500mbit (repeatable)")
    u.add_argument("--leaves", type=int, default=1,
                   help="leaf switches: the nodes in this many blocks, each on a bridge of its own joined to the "
                   "head's by one shaped link, the leaf's uplink; its topology.conf is in the lab's state folder, "
                   "for report --topology (default: 1, every node on one bridge)")
    u.add_argument("--uplink", default="",
                   help="rate of each leaf's uplink, tc units (default: the sum of its nodes' links, non-blocking)")
    u.add_argument("--leaf-link", action="append", metavar="LEAF=RATE",
                   help="give leaf LEAF (0-based) its own uplink rate, a planted slow switch: 0=300mbit (repeatable)")
    u.add_argument("--undeclared", action="store_true",
                   help="declare no expected rate (no platform tag): a plain cluster, as one whose fabric "
                   "collbench has no expected value for; verdicts then rest on what is measured alone")
    u.add_argument("--subnet", default="10.213.0.0/24", help="addresses of the lab (default: 10.213.0.0/24)")
    u.add_argument("--timeout", default="2m",
                   help="how long to wait for the nodes to join: 90s, 2m; a bare number is seconds; at most 1h "
                   "(default: 2m)")
    d = verbs.add_parser("down", help="remove exactly what `up` created")
    e = verbs.add_parser("exec", help="run a command with RAY_ADDRESS and token auth set for the lab")
    e.add_argument("cmd", nargs=argparse.REMAINDER, help="the command, after --")
    for q in (u, d, e):
        q.add_argument("--name", default="lab",
                       help="lab name: 1-6 lower-case letters or digits, starting with a letter (default: lab)")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    if args.verb == "up":
        flag, cpus = _cpus_per_node(args)
        options = lab.LabUp(name=args.name, nodes=args.nodes, cpus_per_node=cpus, cpus_flag=flag, link=args.link,
                            node_links=tuple(args.node_link or ()), subnet=args.subnet, timeout=args.timeout,
                            declared=not args.undeclared, leaves=args.leaves, uplink=args.uplink,
                            leaf_links=tuple(args.leaf_link or ()))
        if flag != "--cpus-per-node":  # said once the value is good: a refusal stays one line
            renamed("lab up --ranks-per-node", "--cpus-per-node")
        try:
            st = lab.up(options)
        except lab.LabError as e:
            print(f"collbench: lab up failed and was cleaned up: {e}", file=sys.stderr)
            return 1
        slow = "".join(f", node {i} at {rate}" for i, rate in sorted(st.node_links.items()))
        print(f"lab {st.name} is up: {st.nodes} node(s) x {st.ranks_per_node} rank(s), links shaped to {st.link}{slow}"
              + ("" if st.declared else "; no expected rate declared"))
        print(f"  address: {st.address} (head {st.head_ip}, nodes {st.node_ip(0)}..{st.node_ip(st.nodes - 1)})")
        if st.leaves > 1:
            uplinks = ", ".join(f"leaf{k} {st.uplink_of(k)}" for k in range(st.leaves))
            print(f"  leaves:  {st.leaves} ({uplinks} uplinks); switch tree: {st.topology_path}")
        print(f"  run:     {lab.run_command(st)}")
        print(f"  down:    collbench lab down --name {st.name}")
        return 0
    st = lab.load(args.name)
    if args.verb == "down":
        problems = lab.down(st)
        if problems:
            print(f"collbench: could not remove: {', '.join(problems)}", file=sys.stderr)
            return 1
        print(f"lab {st.name} removed")
        return 0
    cmd = [c for c in args.cmd if c != "--"] or [os.environ.get("SHELL", "/bin/sh")]
    return subprocess.call(cmd, env={**os.environ, **lab.environment(st)})


def _cpus_per_node(args: argparse.Namespace) -> tuple[str, int]:
    """--cpus-per-node, or its old name (--ranks-per-node, which a run's option means otherwise):
    the flag given and its value."""
    flag, cpus = "--cpus-per-node", args.cpus_per_node
    if args.old_cpus_per_node is not None:
        if cpus is not None and cpus != args.old_cpus_per_node:
            raise UsageError(f"--ranks-per-node {args.old_cpus_per_node}: the old name of --cpus-per-node "
                             f"{cpus}; give one")
        flag, cpus = "--ranks-per-node", args.old_cpus_per_node
    return flag, 2 if cpus is None else cpus
