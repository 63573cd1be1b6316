"""`collbench report PATH`: intra vs inter per collective, alpha-beta fits, diagnosis, plots.

Exit codes: 0 nothing flagged, 1 something flagged (slow pair, node or rank, failed group),
2 unusable input. Never touches Ray.
"""

from __future__ import annotations

import argparse
import sys

from orchestrator.analysis import diagnosis, fits
from orchestrator.commands.options import UNITS, add_analysis_options, check_threshold
from orchestrator.commands.render import render_tables
from orchestrator.errors import UsageError
from orchestrator.results import dataset
from orchestrator.sweep.sizes import format_bytes


def add_parser(sub) -> None:
    p = sub.add_parser(
        "report",
        help="intra- vs inter-node tables, latency-bandwidth fits, slow pairs/nodes/ranks, failures",
        description="Summarise one run of a results dataset (directory, file or s3://, gs:// URI). "
        "Exit 0 when nothing is flagged, 1 when something is, 2 for unusable input.",
    )
    p.add_argument("path", help="results dataset (default output: results)")
    p.add_argument("--run", metavar="RUN_ID", help="run to report (default: the latest)")
    p.add_argument("--collective", default=None, help="collective for the diagnosis (default: all_reduce if measured)")
    p.add_argument("--plots", metavar="DIR", help="write PNG plots here (needs the plot extra: pip install 'collbench[plot]')")
    add_analysis_options(p, threshold=0.10)
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    check_threshold(args.threshold)
    if args.plots:
        _require_matplotlib()
    df = dataset.load(args.path, args.run)
    scale = UNITS[args.unit]
    unit = args.unit
    tables = []
    run_id = df.run_id.iloc[0]
    collectives = list(dict.fromkeys(df.collective))
    for coll in collectives:
        rows, summary = diagnosis.headline(df, coll)
        tables.append((f"{coll}: busbw ({unit}) by message size, run {run_id}",
                       [_scaled(r, scale, keep=("msg_bytes", "intra/inter")) for r in rows]))
        tables.append((f"{coll}: peak busbw ({unit}) and half-peak size",
                       [{"topology": t, "world_size": s["world_size"], "peak_busbw": s["peak_busbw"] * scale,
                         "half_peak_at": format_bytes(s["half_peak_bytes"])} for t, s in summary.items()]))
    for coll in collectives:
        rows = diagnosis.precision(df, coll)
        if rows:
            tables.append((f"{coll}: dtypes at equal element counts (busbw in {unit})",
                           [_scaled(r, scale, keep=("time_us",)) for r in rows]))
        elif df[df.collective == coll].dtype.nunique() > 1:
            tables.append((f"{coll}: dtypes at equal element counts", [{"note": "no element count was measured in "
                           "two dtypes: sweep with -f 2 so that counts coincide"}]))
    tables.append((f"latency-bandwidth fits: time = alpha + bytes / bandwidth ({unit})",
                   [{**f, "bandwidth": None if f["bandwidth"] is None else f["bandwidth"] * scale} for f in fits.fits(df)]))
    target = args.collective or ("all_reduce" if "all_reduce" in collectives else collectives[0])
    if target not in collectives:
        raise UsageError(f"--collective {target}: not in run {run_id} (measured: {', '.join(collectives)})")
    diag = diagnosis.diagnose(df, target, args.threshold)
    tables.append((f"slow node pairs ({target}, >{args.threshold:.0%} below the median pair)",
                   [_scaled(p, scale, keep=("below_median", "msg_bytes")) for p in diag["slow_pairs"]]))
    tables.append((f"slow nodes ({target}, >{args.threshold:.0%} below the median node)",
                   [_scaled(n, scale, keep=("below_median",)) for n in diag["slow_nodes"]]))
    tables.append((f"stragglers (rank time >{args.threshold:.0%} above its group's median)", diag["stragglers"]))
    tables.append(("failed, timed-out and skipped groups", diag["failures"]))
    print(render_tables(tables, args.format))
    if args.plots:
        from orchestrator.analysis import plots

        for path in plots.write(df, args.plots, scale, unit):
            print(f"wrote {path}", file=sys.stderr)
    flagged = sum(len(diag[k]) for k in ("slow_pairs", "slow_nodes", "stragglers", "failures"))
    return 1 if flagged else 0


def _scaled(row: dict, scale: float, keep: tuple[str, ...]) -> dict:
    return {k: (v * scale if isinstance(v, float) and k not in keep else v) for k, v in row.items()}


def _require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError("--plots needs matplotlib: pip install 'collbench[plot]'") from None
