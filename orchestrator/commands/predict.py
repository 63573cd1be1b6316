"""`collbench predict RESULTS --params 7e9 --dp 8 [--tp 8 --pp 4 --fsdp ...]`: per-step
communication time of a training layout, from a measured run's alpha-beta fits. The checks and the
pricing are the operation's (operations/predict.py); here the options, their old spellings, and
the rendering."""

from __future__ import annotations

import argparse
import json
import sys

from orchestrator.commands.options import add_format
from orchestrator.commands.render import on_screen, render_csv, render_tables
from orchestrator.errors import UsageError, renamed
from orchestrator.operations.predict import (
    BUCKET_BYTES,
    BUCKET_RANGE,
    DESCRIPTION,
    DTYPES,
    LIMITS,
    MAX_PARAMS,
    RANKS_PER_NODE,
    PredictOptions,
    bucket_bytes,
    mb_to_bytes,
    parse_count,
)
from orchestrator.operations.predict import predict as price
from orchestrator.operations.sweeps import MAX_MSG_BYTES


def add_parser(sub) -> None:
    p = sub.add_parser(
        "predict",
        help="estimate the communication time of a training step from a measured run",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("path", nargs="?", default="results", help="results dataset (default: results, where run writes)")
    p.add_argument("--run", metavar="RUN_ID", help="run whose fits to use (default: the latest)")
    p.add_argument("--params", type=_count, default=None,
                   help="model parameters, a count and so decimal (K, M, B or G, T = 1e3, 1e6, 1e9, 1e12): 7e9, 7B, "
                   f"1.5T, 350M (at most {MAX_PARAMS:g}); needed unless --trace")
    p.add_argument("--trace", nargs="+", metavar="DUMP", default=None,
                   help="instead of a layout, the collectives of a real job: its Flight Recorder dumps (files or "
                   "folders, as collbench replay reads them); each traced op priced from the fits, its ranks placed "
                   "--ranks-per-node per node")
    p.add_argument("--ops-per-step", type=int, default=None, metavar="N",
                   help="with --trace: ops of rank 0 per step (default: found from the trace)")
    p.add_argument("--what-if", nargs="+", metavar="KEY=VALUE", default=None,
                   help="the same job on another layout, beside this one, term by term: dp=32, tp=4, pp=2, "
                   "ranks-per-node=4, fsdp=yes, params=13B, dtype=float32, bucket=50M, layers=..., hidden=..., "
                   "seq=..., micro-batch=..., micro-batches=...")
    p.add_argument("--what-if-results", nargs="+", metavar=("PATH", "RUN_ID"), default=None,
                   help="price the what-if from another dataset's fits (another cluster or fabric: TCP against "
                   "EFA), optionally of one run; alone, the same layout on that cluster")
    p.add_argument("--replay-run", metavar="RUN_ID", default=None,
                   help="with --trace: a `collbench replay` run of the same dumps in the same dataset, shown beside "
                   "the prediction with the ratio (and the job's own times where the trace has them)")
    for name, default, text in [("dp", 1, "data-parallel degree"), ("tp", 1, "tensor-parallel degree"),
                                ("pp", 1, "pipeline-parallel degree"), ("layers", 32, "transformer layers"),
                                ("hidden", 4096, "hidden size"), ("seq", 4096, "sequence length"),
                                ("micro-batch", 1, "sequences per micro-batch"),
                                ("micro-batches", 1, "micro-batches per step (gradient accumulation)"),
                                ("ranks-per-node", 8, "ranks (GPUs) per node of the layout")]:
        p.add_argument(f"--{name}", type=int, default=None if name == "ranks-per-node" else default,
                       help=f"{text}, 1 to {LIMITS[name.replace('-', '_')]} (default: {default})")
    p.add_argument("--gpus-per-node", type=int, default=None, dest="old_ranks_per_node",
                   help="the old name of --ranks-per-node, taken until the next release")
    p.add_argument("--fsdp", action="store_true", help="fully sharded data parallel instead of gradient all_reduce")
    p.add_argument("--dtype", choices=list(DTYPES), default="bfloat16",
                   help="communicated dtype (default: bfloat16)")
    p.add_argument("--bucket", metavar="SIZE", default=None,
                   help=f"gradient bucket size, binary as -b and -e: 25M = 25 MiB, as DDP's bucket_cap_mb counts; "
                   f"{BUCKET_RANGE}")
    p.add_argument("--bucket-mb", type=float, default=None,
                   help="the old spelling, in MB of 1e6 bytes: --bucket SIZE instead; taken until the next release")
    add_format(p)
    p.set_defaults(handler=main)


def _count(text: str) -> float:
    """7e9, 7B, 1.5T, 350M -> a number of parameters (argparse's type)."""
    try:
        return parse_count(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a count such as 7e9, 7B or 1.5T") from None


def old_spellings(args: argparse.Namespace) -> list[tuple[str, str]]:
    """--ranks-per-node and --bucket (as bucket_bytes) from their old spellings where given, checked
    (a refusal names the flag given); the (old, new) pairs to say once the whole command is valid."""
    said = []
    if args.old_ranks_per_node is not None:
        if args.ranks_per_node is not None and args.ranks_per_node != args.old_ranks_per_node:
            raise UsageError(f"--gpus-per-node {args.old_ranks_per_node}: the old name of --ranks-per-node "
                             f"{args.ranks_per_node}; give one")
        if not 1 <= args.old_ranks_per_node <= LIMITS["ranks_per_node"]:
            raise UsageError(f"--gpus-per-node {args.old_ranks_per_node}: must be between 1 and "
                             f"{LIMITS['ranks_per_node']}")
        args.ranks_per_node = args.old_ranks_per_node
        said.append(("--gpus-per-node", "--ranks-per-node"))
    if args.ranks_per_node is None:
        args.ranks_per_node = RANKS_PER_NODE
    if args.bucket is not None and args.bucket_mb is not None:
        raise UsageError(f"--bucket-mb {args.bucket_mb:g}: the old spelling of --bucket {args.bucket}; give one")
    if args.bucket_mb is not None:
        try:
            args.bucket_bytes = mb_to_bytes(args.bucket_mb)
        except ValueError:
            raise UsageError(f"--bucket-mb {args.bucket_mb:g}: must be between 1e-06 (one byte) and "
                             f"{MAX_MSG_BYTES / 1e6:g}") from None
        said.append(("--bucket-mb", "--bucket SIZE (binary, 25M = 25 MiB)"))
    else:
        args.bucket_bytes = bucket_bytes(args.bucket) if args.bucket is not None else BUCKET_BYTES
    return said


def main(args: argparse.Namespace) -> int:
    said = old_spellings(args)
    found = price(PredictOptions(
        path=args.path, run=args.run, params=args.params, dp=args.dp, tp=args.tp, pp=args.pp, layers=args.layers,
        hidden=args.hidden, seq=args.seq, micro_batch=args.micro_batch, micro_batches=args.micro_batches,
        ranks_per_node=args.ranks_per_node, fsdp=args.fsdp, dtype=args.dtype, bucket_bytes=args.bucket_bytes,
        what_if=tuple(args.what_if or ()), what_if_results=tuple(args.what_if_results or ()),
        trace=tuple(args.trace or ()), ops_per_step=args.ops_per_step, replay_run=args.replay_run))
    if args.format == "json":
        print(json.dumps({"tables": found.tables}, indent=1, default=str))
    elif args.format == "csv":
        print(render_csv(found.csv), end="")
    else:
        print(render_tables(found.titled, args.format, **on_screen(sys.stdout)))
    for note in found.picked:
        print(f"predict: {note}", file=sys.stderr)
    if found.incomplete:
        print(f"collbench: {found.incomplete}", file=sys.stderr)
    for old, now in said + found.renamed:  # once every check passed: a refusal stays one line
        renamed(old, now)
    return found.exit_code
