"""`collbench attach PATH...`: which rank a job's others wait for, from the Flight Recorder dumps
the job writes (operations.attach). Once, or every --every until something is named or --for has
passed. Exit 0: nothing named; 1: a hang or a straggler named; 2: bad input."""

from __future__ import annotations

import argparse
import json
import sys

from orchestrator.operations.attach import FR_SETTINGS, AttachOptions, Look, looks


def add_parser(sub) -> None:
    p = sub.add_parser(
        "attach",
        help="name the rank a running job waits for (a hang, or a chronic straggler) from its Flight Recorder dumps",
        description="Read a PyTorch job's Flight Recorder dumps (one per rank, named <prefix><rank>: where "
        f"TORCH_FR_DUMP_TEMP_FILE puts them; a job records with {FR_SETTINGS}) and say, across its process "
        "groups: a hang (the collective some ranks entered and others never reached, the ranks missing and how "
        "long the others have waited) and chronic stragglers (a rank that arrives after the others far more "
        "often than chance, by a median of at least --min-late: its lateness, how often it was last, what it "
        "alone costs). Arrival, not duration: the rank everyone waits for has the shortest collectives. "
        "Reads files only; the job is not touched. Exit 0: nothing named; 1: a hang or a straggler named; "
        "2: bad input.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="the folder the dumps land in, or the dump files")
    p.add_argument("--every", metavar="DURATION", help="look again every DURATION (30s, 5m) until something is named "
                   "or --for has passed (default: look once)")
    p.add_argument("--for", dest="for_", metavar="DURATION", default="1h",
                   help="with --every, stop looking after this long, nothing named: exit 0 (default: 1h)")
    p.add_argument("--hang-after", metavar="DURATION", default="30s",
                   help="a collective some ranks have waited in this long, others never reached, is a hang; younger, "
                   "a job in flight (default: 30s)")
    p.add_argument("--min-late", metavar="MS", type=float, default=5.0,
                   help="the least median lateness, in ms, that names a straggler; keep it above the nodes' clock "
                   "error where the dumps hold no completion times (NTP: a few ms) (default: 5)")
    p.add_argument("--hosts", metavar="H1,H2,...",
                   help="where the ranks ran: one host per rank, or one per node for equal blocks of ranks (a dump "
                   "does not say)")
    p.add_argument("--format", choices=("table", "json"), default="table", help="lines, or one JSON object a look")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    options = AttachOptions(paths=tuple(args.paths), hang_after=args.hang_after, min_late_ms=args.min_late,
                            hosts=tuple(h.strip() for h in args.hosts.split(",")) if args.hosts else (),
                            every=args.every, for_=args.for_)
    named = False
    for look in looks(options):
        show(look, args.format)
        named = look.attached.named
    return 1 if named else 0


def show(look: Look, fmt: str) -> None:
    a = look.attached
    if look.waiting is not None:
        print(f"collbench: attach: nothing to read yet ({look.waiting}); looking again", file=sys.stderr, flush=True)
        return
    if fmt == "json":
        print(json.dumps({"ranks": a.ranks, "collectives": a.collectives, "clocks": a.clocks, "limits": list(a.limits),
                          "hosts": list(look.hosts), "read_s": round(look.read_s, 4),
                          "hang": a.hang.__dict__ if a.hang else None,
                          "stragglers": [s.__dict__ for s in a.stragglers]}), flush=True)
        return
    print(f"collbench: attach: {look.dumps} dump(s), {a.ranks} rank(s), {a.collectives} collective(s) read in "
          f"{look.read_s:.2f} s; clocks {a.clocks}", file=sys.stderr, flush=True)
    if a.hang:
        print(f"{a.hang.line()} ({'; '.join(look.where(r) for r in a.hang.missing)})")
    for s in a.stragglers:
        print(f"{s.line()} ({look.where(s.rank)})")
    if not a.named:
        print("nothing named: no hang, no chronic straggler")
    for line in a.limits:
        print(f"collbench: attach: cannot see: {line}", file=sys.stderr)
