"""`collbench predict RESULTS --params 7e9 --dp 8 [--tp 8 --pp 4 --fsdp ...]`: per-step
communication time of a training layout, from a measured run's alpha-beta fits."""

from __future__ import annotations

import argparse
import json
import sys

from orchestrator.analysis import predict
from orchestrator.commands.options import add_format
from orchestrator.commands.render import render_csv, render_tables
from orchestrator.errors import UsageError
from orchestrator.results import dataset
from workloads.dtypes import ELEMENT_BYTES


def add_parser(sub) -> None:
    p = sub.add_parser(
        "predict",
        help="estimate the communication time of a training step from a measured run",
        description=predict.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("path", help="results dataset")
    p.add_argument("--run", metavar="RUN_ID", help="run whose fits to use (default: the latest)")
    p.add_argument("--params", type=_count, required=True,
                   help=f"model parameters: 7e9, 7B, 1.5T, 350M (at most {MAX_PARAMS:g})")
    for name, default, text in [("dp", 1, "data-parallel degree"), ("tp", 1, "tensor-parallel degree"),
                                ("pp", 1, "pipeline-parallel degree"), ("layers", 32, "transformer layers"),
                                ("hidden", 4096, "hidden size"), ("seq", 4096, "sequence length"),
                                ("micro-batch", 1, "sequences per micro-batch"),
                                ("micro-batches", 1, "micro-batches per step (gradient accumulation)"),
                                ("gpus-per-node", 8, "ranks per node")]:
        p.add_argument(f"--{name}", type=int, default=default,
                       help=f"{text}, 1 to {LIMITS[name.replace('-', '_')]} (default: {default})")
    p.add_argument("--fsdp", action="store_true", help="fully sharded data parallel instead of gradient all_reduce")
    p.add_argument("--dtype", choices=list(ELEMENT_BYTES), default="bfloat16", help="communicated dtype (default: bfloat16)")
    p.add_argument("--bucket-mb", type=float, default=25.0,
                   help="gradient bucket size in MB (1e6 bytes), at least 1e-06 (one byte) (default: 25)")
    add_format(p)
    p.set_defaults(handler=main)


_SUFFIX = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
# Bounds that keep the arithmetic finite and quick (a group's ranks are listed to find its
# topology): a million-rank layout is far past any cluster.
LIMITS = {"dp": 1 << 20, "tp": 1 << 20, "pp": 1 << 20, "layers": 1 << 20, "hidden": 1 << 30, "seq": 1 << 30,
          "micro_batch": 1 << 20, "micro_batches": 1 << 20, "gpus_per_node": 1 << 10}
MAX_PARAMS = 1e15


def _count(text: str) -> float:
    """7e9, 7B, 1.5T, 350M -> a number of parameters."""
    t = text.strip().upper()
    try:
        return float(t[:-1]) * _SUFFIX[t[-1]] if t and t[-1] in _SUFFIX else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a count such as 7e9, 7B or 1.5T") from None


def check_layout(args: argparse.Namespace) -> None:
    for name, high in LIMITS.items():
        value = getattr(args, name)
        if not 1 <= value <= high:
            shown = value if abs(value) < 10**30 else f"{str(value)[:12]}... ({len(str(value))} digits)"
            raise UsageError(f"--{name.replace('_', '-')} {shown}: must be between 1 and {high}")
    if args.dp * args.tp * args.pp > 1 << 30:
        raise UsageError(f"--dp {args.dp} x --tp {args.tp} x --pp {args.pp}: more than {1 << 30} ranks")
    if not 0 < args.params <= MAX_PARAMS:  # nan and inf too
        raise UsageError(f"--params {args.params:g}: must be positive, at most {MAX_PARAMS:g}")
    if not 1e-6 <= args.bucket_mb <= 1e9:
        raise UsageError(f"--bucket-mb {args.bucket_mb:g}: must be between 1e-06 (one byte) and 1e+09")
    if args.tp % args.gpus_per_node and args.gpus_per_node % args.tp:
        raise UsageError(f"--tp {args.tp}: neither divides nor is a multiple of --gpus-per-node {args.gpus_per_node}, "
                         "so tensor-parallel groups would straddle nodes unevenly")
    if args.pp > args.layers:
        raise UsageError(f"--pp {args.pp}: more pipeline stages than --layers {args.layers}")
    if args.layers % args.pp:
        raise UsageError(f"--pp {args.pp}: does not divide --layers {args.layers} into equal stages")


def main(args: argparse.Namespace) -> int:
    check_layout(args)
    layout = predict.Layout(
        params=args.params, dp=args.dp, tp=args.tp, pp=args.pp, fsdp=args.fsdp, dtype_bytes=ELEMENT_BYTES[args.dtype],
        bucket_mb=args.bucket_mb, layers=args.layers, hidden=args.hidden, seq=args.seq,
        micro_batch=args.micro_batch, micro_batches=args.micro_batches, gpus_per_node=args.gpus_per_node,
    )
    df = dataset.load(args.path, args.run, columns=["run_id", "status", "collective", "topology", "world_size",
                                                    "msg_bytes", "time_us"])
    terms = predict.predict(layout, predict.fit_table(df))
    if not terms:
        raise UsageError("nothing to predict: set --dp, --tp or --pp above 1")
    missing = [t for t in terms if t["time_ms"] is None]
    total = sum(t["time_ms"] for t in terms if t["time_ms"] is not None)
    summary = [{"run": df.run_id.iloc[0], "world_size": args.dp * args.tp * args.pp,
                "nodes": -(-args.dp * args.tp * args.pp // args.gpus_per_node),
                "comm_ms_per_step": None if missing else total, "measured_terms_ms": total,
                "complete": not missing,
                "note": ("incomplete: not measured: " + "; ".join(f"{t['term']} ({t['measure_with']})" for t in missing))
                if missing else "upper bound: assumes no overlap with compute (T_step = T_comp + T_comm - T_overlap)"}]
    tables = {"summary": summary, "terms": terms}
    if args.format == "json":
        print(json.dumps({"tables": tables}, indent=1, default=str))
    elif args.format == "csv":
        print(render_csv(terms), end="")
    else:
        print(render_tables([("per-step communication", summary), ("terms", terms)], args.format))
    if missing:
        print(f"collbench: incomplete: {len(missing)} term(s) not measured: "
              + ", ".join(t["term"] for t in missing), file=sys.stderr)
    return 1 if missing else 0
