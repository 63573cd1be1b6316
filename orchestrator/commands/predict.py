"""`collbench predict RESULTS --params 7e9 --dp 8 [--tp 8 --pp 4 --fsdp ...]`: per-step
communication time of a training layout, from a measured run's alpha-beta fits.

Size: over 300 lines for one command's options, their checks and the what-if vocabulary (each
key a layout or cluster term); the pricing itself is analysis/predict.py.
"""

from __future__ import annotations

import argparse
import json
import sys

from orchestrator.analysis import predict
from orchestrator.commands.options import add_format
from orchestrator.commands.render import render_csv, render_tables
from orchestrator.errors import UsageError, renamed
from orchestrator.results import dataset
from orchestrator.sweep.sizes import format_bytes, parse_bytes
from orchestrator.sweep.spec import MAX_MSG_BYTES
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
    p.add_argument("--dtype", choices=list(ELEMENT_BYTES), default="bfloat16",
                   help="communicated dtype (default: bfloat16)")
    p.add_argument("--bucket", metavar="SIZE", default=None,
                   help=f"gradient bucket size, binary as -b and -e: 25M = 25 MiB, as DDP's bucket_cap_mb counts; 1 to "
                   f"{format_bytes(MAX_MSG_BYTES)} (default: {format_bytes(BUCKET_BYTES)})")
    p.add_argument("--bucket-mb", type=float, default=None,
                   help="the old spelling, in MB of 1e6 bytes: --bucket SIZE instead; taken until the next release")
    add_format(p)
    p.set_defaults(handler=main)


_SUFFIX = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
# Bounds that keep the arithmetic finite and quick (a group's ranks are listed to find its
# topology): a million-rank layout is far past any cluster.
LIMITS = {"dp": 1 << 20, "tp": 1 << 20, "pp": 1 << 20, "layers": 1 << 20, "hidden": 1 << 30, "seq": 1 << 30,
          "micro_batch": 1 << 20, "micro_batches": 1 << 20, "ranks_per_node": 1 << 10}
MAX_PARAMS = 1e15
RANKS_PER_NODE = 8
BUCKET_BYTES = 25 << 20  # DDP's bucket_cap_mb=25 is 25 MiB


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
    if not 1 <= args.bucket_bytes <= MAX_MSG_BYTES:
        raise UsageError(f"--bucket {args.bucket_bytes}: must be between 1 and {MAX_MSG_BYTES} bytes "
                         f"({format_bytes(MAX_MSG_BYTES)})")
    if args.tp % args.ranks_per_node and args.ranks_per_node % args.tp:
        raise UsageError(f"--tp {args.tp}: neither divides nor is a multiple of --ranks-per-node "
                         f"{args.ranks_per_node}, so tensor-parallel groups would straddle nodes unevenly")
    if args.pp > args.layers:
        raise UsageError(f"--pp {args.pp}: more pipeline stages than --layers {args.layers}")
    if args.layers % args.pp:
        raise UsageError(f"--pp {args.pp}: does not divide --layers {args.layers} into equal stages")


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
            args.bucket_bytes = _mb_to_bytes(args.bucket_mb)
        except ValueError:
            raise UsageError(f"--bucket-mb {args.bucket_mb:g}: must be between 1e-06 (one byte) and "
                             f"{MAX_MSG_BYTES / 1e6:g}") from None
        said.append(("--bucket-mb", "--bucket SIZE (binary, 25M = 25 MiB)"))
    else:
        args.bucket_bytes = _bucket_bytes(args.bucket) if args.bucket is not None else BUCKET_BYTES
    args.said_renamed = said  # _what_if_args adds its own
    return said


def _mb_to_bytes(mb: float) -> int:
    """--bucket-mb's meaning, kept for its last release: MB of 1e6 bytes, at least one byte."""
    if not 1e-6 <= mb <= MAX_MSG_BYTES / 1e6:  # nan too
        raise ValueError(mb)
    return max(1, round(mb * 1e6))


def _bucket_bytes(text: str) -> int:
    try:
        return parse_bytes(text)
    except ValueError:
        raise UsageError(f"--bucket {text[:40]!r}: expected a size such as 25M (binary: 25 MiB)") from None


def main(args: argparse.Namespace) -> int:
    old_spellings(args)
    code = _main(args)
    for old, now in args.said_renamed:  # once every check passed: a refusal stays one line
        renamed(old, now)
    return code


def _main(args: argparse.Namespace) -> int:
    if args.trace:
        if args.what_if or args.what_if_results:
            raise UsageError("--what-if: with a layout (--params ...), not with --trace")
        return _predict_trace(args)
    if args.replay_run or args.ops_per_step is not None:
        raise UsageError(f"--{'replay-run' if args.replay_run else 'ops-per-step'}: only with --trace")
    if args.what_if_results and len(args.what_if_results) > 2:
        raise UsageError(f"--what-if-results {' '.join(args.what_if_results)}: PATH and at most one RUN_ID")
    if args.params is None:
        raise UsageError("--params: required (the model's parameters), unless --trace prices a real job's ops")
    check_layout(args)
    fits_df = _fit_rows(args.path, args.run)
    summary, terms = _priced(args, predict.fit_table(fits_df), fits_df.run_id.iloc[0])
    tables = {"summary": [summary], "terms": terms}
    titled = [("per-step communication", [summary]), ("terms", terms)]
    what_if = _what_if_args(args)
    if what_if is not None:
        other = _fit_rows(args.what_if_results[0], (args.what_if_results[1:] or [None])[0]) \
            if args.what_if_results else fits_df
        summary2, terms2 = _priced(what_if, predict.fit_table(other), other.run_id.iloc[0])
        summary2["what_if"] = " ".join(args.what_if or []) + (f" fits of {args.what_if_results[0]} run "
                                                              f"{summary2['run']}" if args.what_if_results else "")
        by_term = {t["term"]: t for t in terms}
        compared = [{"term": t["term"], "now_ms": by_term.get(t["term"], {}).get("time_ms"), "what_if_ms": t["time_ms"],
                     "ratio": t["time_ms"] / by_term[t["term"]]["time_ms"]
                     if t["time_ms"] is not None and by_term.get(t["term"], {}).get("time_ms") else None,
                     "what_if_fit": t["fit"]} for t in terms2]
        compared += [{"term": name, "now_ms": t["time_ms"], "what_if_ms": 0.0, "ratio": 0.0,
                      "what_if_fit": "no such term"}
                     for name, t in by_term.items() if name not in {t2["term"] for t2 in terms2}]
        tables.update(what_if=[summary2], what_if_terms=compared)
        titled += [("what if: per-step communication", [summary2]), ("what if: terms, now and then", compared)]
        terms = terms + terms2
    missing = [t for t in terms if t["time_ms"] is None]
    if args.format == "json":
        print(json.dumps({"tables": tables}, indent=1, default=str))
    elif args.format == "csv":
        print(render_csv(tables.get("what_if_terms", terms)), end="")
    else:
        print(render_tables(titled, args.format))
    if missing:
        print(f"collbench: incomplete: {len(missing)} term(s) not measured: "
              + ", ".join(t["term"] for t in missing), file=sys.stderr)
    return 1 if missing else 0


def _fit_rows(path: str, run: str | None):
    """The rows a run's fits are made from: a sweep's (a replay's ops are not fitted)."""
    df = dataset.load(path, run, columns=["run_id", "status", "collective", "topology", "world_size", "msg_bytes",
                                          "time_us", "time_us_p50", "time_us_p99", "time_us_min", "pattern"])
    if (df.pattern == "replay").all():
        raise UsageError(f"{path}: run {run or '(the latest)'} holds no sweep, only replayed ops: give "
                         "--run RUN_ID of a `collbench run` sweep to take the fits from")
    return df


def _priced(args: argparse.Namespace, fits: dict, run_id: str) -> tuple[dict, list[dict]]:
    """The layout `args` describe, priced from `fits`: the summary and one row per term."""
    layout = predict.Layout(
        params=args.params, dp=args.dp, tp=args.tp, pp=args.pp, fsdp=args.fsdp, dtype_bytes=ELEMENT_BYTES[args.dtype],
        bucket_mb=args.bucket_bytes / 1e6,  # Layout counts MB of 1e6 bytes
        layers=args.layers, hidden=args.hidden, seq=args.seq,
        micro_batch=args.micro_batch, micro_batches=args.micro_batches, gpus_per_node=args.ranks_per_node,
    )
    terms = predict.predict(layout, fits)
    if not terms:
        raise UsageError("nothing to predict: set --dp, --tp or --pp above 1")
    missing = [t for t in terms if t["time_ms"] is None]
    total = sum(t["time_ms"] for t in terms if t["time_ms"] is not None)
    return {"run": run_id, "world_size": args.dp * args.tp * args.pp,
            "nodes": -(-args.dp * args.tp * args.pp // args.ranks_per_node),
            "comm_ms_per_step": None if missing else total, "measured_terms_ms": total,
            "complete": not missing,
            "note": ("incomplete: not measured: " + "; ".join(f"{t['term']} ({t['measure_with']})" for t in missing))
            if missing else "upper bound: assumes no overlap with compute (T_step = T_comp + T_comm - T_overlap)"
            }, terms


WHAT_IF_KEYS = ("dp", "tp", "pp", "layers", "hidden", "seq", "micro-batch", "micro-batches", "ranks-per-node",
                "params", "bucket", "dtype", "fsdp")
OLD_WHAT_IF_KEYS = {"gpus-per-node": "ranks-per-node", "bucket-mb": "bucket"}  # taken until the next release


def _what_if_args(args: argparse.Namespace) -> argparse.Namespace | None:
    """The layout with --what-if's changes (checked as the layout is), or None without --what-if."""
    if not args.what_if and not args.what_if_results:
        return None
    changed = argparse.Namespace(**vars(args))
    for item in args.what_if or []:
        key, sep, value = item.partition("=")
        if not sep or key not in (*WHAT_IF_KEYS, *OLD_WHAT_IF_KEYS):
            raise UsageError(f"--what-if {item}: expected KEY=VALUE with KEY one of {', '.join(WHAT_IF_KEYS)}")
        if key in OLD_WHAT_IF_KEYS:
            args.said_renamed.append((f"--what-if {key}", OLD_WHAT_IF_KEYS[key]))
        name = {"bucket": "bucket_bytes", "bucket-mb": "bucket_bytes", "gpus-per-node": "ranks_per_node"}.get(
            key, key.replace("-", "_"))
        try:
            if key == "params":
                parsed = _count(value)
            elif key == "bucket":
                parsed = parse_bytes(value)
            elif key == "bucket-mb":
                parsed = _mb_to_bytes(float(value))
            elif key == "dtype":
                if value not in ELEMENT_BYTES:
                    raise ValueError(value)
                parsed = value
            elif key == "fsdp":
                parsed = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}[value.lower()]
            else:
                parsed = int(value)
        except (ValueError, KeyError, argparse.ArgumentTypeError):
            raise UsageError(f"--what-if {item}: {value!r} is not a value for {key}") from None
        setattr(changed, name, parsed)
    try:
        check_layout(changed)
    except UsageError as e:
        raise UsageError(f"--what-if: {e}") from None
    return changed


def _predict_trace(args: argparse.Namespace) -> int:
    """A traced job's steps priced from a run's fits, beside a replay of them and the job's own times."""
    from orchestrator.analysis import replay
    from orchestrator.sweep import trace

    if not 1 <= args.ranks_per_node <= LIMITS["ranks_per_node"]:
        raise UsageError(f"--ranks-per-node {args.ranks_per_node}: must be between 1 and {LIMITS['ranks_per_node']}")
    loaded = trace.load(args.trace)
    program, notes = trace.program(loaded, trace.find_steps(loaded.ops[0], args.ops_per_step), gaps=False)
    df = _fit_rows(args.path, args.run)
    steps, terms = predict.trace_steps(program, predict.fit_table(df), args.ranks_per_node)
    missing = [t for t in terms if t["time_ms"] is None]
    predicted = sorted(s["comm_ms"] for s in steps)[len(steps) // 2] if steps and not missing else None
    summary = {"run": df.run_id.iloc[0] if len(df) else None, "world_size": loaded.world_size,
               "steps": program.steps, "predicted_ms_per_step": predicted, "complete": not missing}
    if args.replay_run:
        rows = dataset.load(args.path, args.replay_run)
        measured = replay.step_times(rows[rows.pattern == replay.PATTERN])
        if not measured:
            raise UsageError(f"--replay-run {args.replay_run}: no replayed step in it")
        comm = sorted(v["comm_us"] for v in measured.values())
        summary["replayed_ms_per_step"] = comm[len(comm) // 2] / 1e3
        summary["predicted/replayed"] = predicted / summary["replayed_ms_per_step"] if predicted else None
    traced = [op.duration_us for ops in loaded.ops.values() for op in ops if op.duration_us is not None]
    if traced:
        summary["traced_ms_per_step"] = sum(op.traced_us or 0 for op in program.ops[0]) / max(program.steps, 1) / 1e3
    summary["note"] = "; ".join(notes) or "-"
    tables = {"summary": [summary], "terms": terms}
    if args.format == "json":
        print(json.dumps({"tables": tables}, indent=1, default=str))
    elif args.format == "csv":
        print(render_csv(terms), end="")
    else:
        print(render_tables([("per-step communication of the traced job (median step)", [summary]),
                             ("terms (per step)", terms)], args.format))
    if missing:
        print(f"collbench: incomplete: {len(missing)} traced op shape(s) without an accepted fit: "
              + ", ".join(t["term"] for t in missing), file=sys.stderr)
    return 1 if missing else 0
