"""`collbench qualify`: name the slow, hanging, failing and lost nodes of a cluster in a few rounds.

`sweep.qualify.Qualifier` decides each round's probes (groups of whole nodes); each round runs on
Ray as a sweep's round does, its rows (with their `phase`) go to the same dataset as a run's, and
what each probe reached goes back to the qualifier. Exit 0 when every node passes, 1 when a
culprit is named, 2 for bad input; SIGUSR1: the verdicts of the rounds so far, exit 1 or 138.
"""

from __future__ import annotations

import argparse
import json
import sys

from orchestrator.commands.options import (
    add_doctor_option,
    add_expected_options,
    add_scheduler_options,
    add_spec_options,
    spec_from_args,
)
from orchestrator.commands.render import on_screen, render_junit, render_tables
from orchestrator.operations import COMMAND_LINE, Voice
from orchestrator.operations.checks import PEER_THRESHOLD
from orchestrator.operations.qualify import (
    COLLECTIVES,
    DTYPES,
    SWEEPS,
    NodeVerdict,
    QualifyOptions,
    qualify,
    uplink_line,
)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "qualify",
        help="name the slow, hanging, failing and lost nodes in a few rounds (not one per node pair)",
        description="Probe the cluster's nodes in rounds: every node alone, rounds of fresh pairs (every node "
        "looked at six times), retests of suspects with partners that proved fast, then all nodes at once, "
        "bisected when slow or hung. Each node gets a verdict (pass, slow, intermittent, hang, failed, lost) "
        "with its evidence (`slow in k of m probes`); the probes' rows go to --output with a `phase` column. A "
        "probe is slow below --min-fraction of the expected busbw where one applies (docs/guides/expected.md), "
        "else below what the fastest agreeing probes delivered (a probe is as fast as its slowest node: never "
        "the median, which is the slow level where most nodes are slow) by --threshold and the noise. Where "
        "nothing is slow and no expected value applies, it says that the nodes agree, and that only an "
        "expected value tells a healthy fabric from one equally slow. Exit 0 when every node passes, 1 when "
        "one does not or a switch's uplink is slow (--topology), 2 for bad input.",
    )
    add_spec_options(p, only=SWEEPS.fields, defaults=SWEEPS.defaults, helps={
        "collectives": "the one collective to probe with: " + ",".join(COLLECTIVES),
        "dtypes": "the one element type to probe with: " + ",".join(DTYPES) + " (not all)"},
        names={"collectives": ("--collective",), "dtypes": ("--dtype",)})
    p.add_argument("--threshold", type=float, default=PEER_THRESHOLD,
                   help="without an expected value, a probe this fraction below what the fastest agreeing probes "
                   f"delivered, and below the noise they show, is slow (gates: twice it) (default: {PEER_THRESHOLD:g})")
    add_expected_options(p, "with an expected value, a probe is slow")
    p.add_argument("--format", choices=("table", "json", "junit"), default="table",
                   help="verdicts as a table; as JSON with fields node, verdict, evidence; or as JUnit XML for CI "
                   "systems: a test case per node (a verdict other than pass a <failure>, a node not settled "
                   "<skipped>) and per slow uplink (default: table)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random pairing (default: 0)")
    add_scheduler_options(p, "did not pass")
    p.add_argument("--topology", metavar="FILE",
                   help="the fabric's switch tree: Slurm's topology.conf (SwitchName=leaf1 Nodes=gpu[001-032]; "
                   "SwitchName=spine Switches=leaf[1-2]) or a YAML file of the same (switches: {leaf1: {nodes: "
                   "[...]}}). A round of pairs inside each leaf and two of every node paired across leaves come "
                   "first; pairs inside and across leaves are judged apart, and a leaf whose pairs across are slow "
                   "while those inside are not is named slow_uplink (exit 1), its nodes not on their own (never "
                   "drained for it). Nodes are matched by Slurm name, host name or IP; one the file does not list is "
                   "refused. kubernetes:LEAF_LABEL[,SPINE_LABEL]: the nodes' labels (e.g. GKE's cloud.google.com/gce-topology-"
                   "subblock), read with kubectl (nodes and pods: the Ray nodes are placed by pod IP; a node without the "
                   "label is judged without a leaf). Default: inside a Slurm "
                   "job, `scontrol show topology` where the site has a tree (a node it does not list is judged "
                   "without a leaf); none outside one ('none': no tree)")
    p.add_argument("--run-id", metavar="ID",
                   help="name the qualification's run (default: a new time-stamped id); one --output holds already is "
                   "refused (a qualification has no resume). SIGUSR1 (Slurm's --signal=B:USR1@120, ahead of the time "
                   "limit; examples/slurm/qualify.sbatch finds the driver by this id) ends it after the round in "
                   "flight: the nodes named so far are named (and drained with --drain), the others said unsettled; "
                   "exit 1 where a node or an uplink was named, else 138")
    add_doctor_option(p)
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    options = QualifyOptions(sweep=spec_from_args(args), threshold=args.threshold, min_fraction=args.min_fraction,
                             seed=args.seed, expected=args.expected, doctor=not args.no_doctor,
                             scheduler=args.scheduler, drain=args.drain, topology=args.topology, run_id=args.run_id)
    log = sys.stderr if args.format in ("json", "junit") else sys.stdout  # stdout: the JSON or XML alone
    result = qualify(options, voice=Voice(lambda line: print(line, file=log, flush=True), COMMAND_LINE.problem),
                     log=log)
    if not result.judged:
        return result.exit_code
    if args.format == "json":
        print(json.dumps({"run_id": result.run_id, "state": result.state.value, "rounds": result.rounds,
                          "wall_s": round(result.wall_s, 3), "speed_judged": result.speed_judged,
                          "unjudged": result.unjudged, "agreement": result.agreement,
                          "nodes": [_json(v, result) for v in result.nodes], "unsettled": result.unsettled,
                          "switches": result.uplinks}, indent=1))
    elif args.format == "junit":
        print(render_junit("collbench qualify", junit_cases(result)))
    else:
        switches = [{"switch": ",".join(u["switches"]), "verdict": u["verdict"], "nodes": ",".join(u["nodes"]),
                     "detail": u["detail"]} for u in result.uplinks]
        print(render_tables([("verdicts", [_table_row(v) for v in result.nodes]),
                             *([("switches", switches)] if switches else [])], "table", **on_screen(sys.stdout)))
    for ip, act in result.actions.items():  # what takes each failing node out, and how running it went
        done = result.drained.get(ip)
        print(done.line() if done else f"collbench: to take {act.node} out of service: " + "; ".join(act.shown()),
              file=log, flush=True)
    for note in (result.unjudged, result.agreement):  # never a silent pass, nor a bare "healthy"
        if note:
            print(f"collbench: {note}", file=log, flush=True)
    for u in result.uplinks:  # a switch is no node's to drain: the operator checks its uplink
        print(f"collbench: {uplink_line(u['switches'], u['detail'], len(u['nodes']))}", file=log, flush=True)
    n = len(result.nodes)
    said = (f"{n - len(result.failing)} of {n} node(s) pass" if result.unsettled is None else
            f"{n} node(s) named so far; not settled: {', '.join(result.unsettled) or 'none'}")
    print(f"collbench: {said}; {result.rounds} round(s), {result.probes} probe(s), wall {result.wall_s:.1f}s, "
          f"{result.startup}; rows in {result.rows_at}", file=log, flush=True)
    return result.exit_code


def junit_cases(result) -> list[dict]:
    """A test case per node (its verdict: pass ok, any other a failure with its evidence; a node a
    stopped qualification left unsettled skipped) and per slow uplink, as render_junit takes them."""
    cases = []
    for v in result.nodes:
        row = _table_row(v)
        cases.append({"classname": f"{row['host']} ({v.node})", "name": "qualify",
                      "status": "ok" if v.verdict.value == "pass" else "fail",
                      "message": f"{v.verdict.value}: {row['detail']}" if row["detail"] else v.verdict.value})
    cases += [{"classname": ip, "name": "qualify", "status": "skip", "message": "not settled: the qualification "
               "stopped before this node's verdict"} for ip in result.unsettled or ()]
    cases += [{"classname": ",".join(u["switches"]), "name": "uplink", "status": "fail",
               "message": f"{u['verdict']}: {u['detail']}"} for u in result.uplinks]
    return cases


def _json(v: NodeVerdict, result) -> dict:
    """The verdict as JSON, with the command that takes the node out of service and, under
    --drain, whether it did (`drained`: ok, said)."""
    act, done = result.actions.get(v.node), result.drained.get(v.node)
    return {**v.to_json(), "action": act.to_json() if act else None,
            "drained": {"ok": done.ok, "said": done.said} if done else None}


def _table_row(v: NodeVerdict) -> dict:
    """The verdict with the evidence that decided it."""
    e = v.deciding()
    partners = [ip for ip in e.get("nodes", []) if ip != v.node]
    return {"node": v.node, "host": v.host + (f" ({v.name})" if v.name else ""), "verdict": v.verdict.value,
            "phase": e.get("phase"),
            "with": ",".join(partners[:3]) + (f",+{len(partners) - 3}" if len(partners) > 3 else ""),
            "busbw": e.get("busbw_gbps"), "reference": e.get("reference_gbps"),
            "detail": "; ".join(filter(None, [v.detail, e.get("detail") or e.get("status")]))}
