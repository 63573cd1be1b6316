"""`collbench report PATH`: intra vs inter per collective, latency, fits, and every flag.

Exit codes: 0 nothing flagged, 1 something flagged (a slow pair, node, rail, GPU pair or group,
a straggler, a failed group), 2 unusable input. Never touches Ray or torch.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

from orchestrator.commands.options import add_analysis_options, add_expected_options
from orchestrator.commands.render import on_screen, render_csv, render_nccl_tests, render_tables
from orchestrator.errors import UsageError
from orchestrator.operations import report as reporting
from orchestrator.operations.checks import PEER_THRESHOLD
from orchestrator.operations.report import TABLE_COLUMNS, TABLES, Report, title

TABLE_NAMES = (*TABLES, "flags")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "report",
        help="intra- vs inter-node tables, latency, fits, slow nodes/pairs/rails/GPUs/groups, failures",
        description="Summarise one run of a results dataset (directory, file or s3://, gs:// URI): busbw and "
        "latency by size per topology, peaks, fits, and flags from comparing every group with its peers of "
        "the same shape. Exit 0 when nothing is flagged, 1 when something is, 2 for unusable input.",
    )
    p.add_argument("path", nargs="?", default="results", help="results dataset (default: results, where run writes)")
    p.add_argument("--run", metavar="RUN_ID", help="run to report (default: the latest)")
    p.add_argument("--collective", default=None, help="report only this collective (default: every one measured)")
    p.add_argument("--table", choices=TABLE_NAMES, metavar="NAME",
                   help="print only this table: " + ", ".join(TABLE_NAMES) + " (with --format csv: plain CSV)")
    p.add_argument("--csv-dir", metavar="DIR",
                   help="with --format csv (refused without it): write every table to DIR/NAME.csv")
    p.add_argument("--plots", metavar="DIR", nargs="?", const="",
                   help="write PNG plots to DIR (default: PATH/_plots/RUN_ID, which readers of PATH skip)")
    add_expected_options(p, "flag measurements")
    p.add_argument("--topology", metavar="FILE",
                   help="the fabric's switch tree: Slurm's topology.conf (SwitchName=leaf1 Nodes=gpu[001-032]; "
                   "SwitchName=spine Switches=leaf[1-2]) or the same as YAML (docs/guides/report.md); node pairs are "
                   "judged inside and across leaves apart, and a leaf whose pairs across it are slow while those inside "
                   "are not is flagged slow_uplink, its nodes not on their own (a spine above leaves likewise, judged "
                   "first). Nodes are matched by scheduler name, "
                   "host name or IP; one the file does not list is refused")
    add_analysis_options(p, threshold=PEER_THRESHOLD, formats=("html", "nccl-tests"),
                         formats_help="; html: one self-contained page to send (flags with their reasons first, "
                         "intra vs inter, expected, plots inline), on stdout; nccl-tests: the "
                         "run's ok rows in nccl-tests' own table layout, a block per collective, dtype, op and group "
                         "shape (topology, ranks, nodes), out-of-place and in-place side by side, the median over the "
                         "shape's groups, busbw in GB/s, and its '# Avg bus bandwidth' line")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    options = reporting.ReportOptions(path=args.path, run_id=args.run, collective=args.collective,
                                      threshold=args.threshold, unit=args.unit, expected=args.expected,
                                      min_fraction=args.min_fraction, topology=args.topology)
    if args.format == "csv" and not (args.table or args.csv_dir):
        raise UsageError("--format csv: name one table with --table NAME, or a folder for all of them with --csv-dir")
    if args.csv_dir is not None:
        if args.format != "csv":  # refused, not implied: --format json --csv-dir would say two things
            raise UsageError(f"--csv-dir {args.csv_dir[:80]!r}: writes CSV files, only with --format csv")
        if not args.csv_dir or not args.csv_dir.isprintable():
            raise UsageError(f"--csv-dir {args.csv_dir[:80]!r}: not a folder name")
    if args.format == "html" and (args.table or args.csv_dir):
        raise UsageError("--format html: the whole report in one page; drop --table/--csv-dir")
    if args.format == "nccl-tests":
        if args.table or args.csv_dir is not None or args.plots is not None:
            raise UsageError("--format nccl-tests: the run's rows in nccl-tests' layout; drop --table/--csv-dir/--plots")
        blocks, picked = reporting.nccl_tests_blocks(options)
        _say_picked(picked, args.path)
        print(render_nccl_tests(blocks), end="")
        return 0
    if args.plots is not None or args.format == "html":
        reporting.check_plotting()
    found = reporting.report(options)
    _say_picked(found.picked, args.path)
    plots_dir = reporting.plots_dir(args.path, args.plots, found.run_id) if args.plots is not None else None
    if args.format == "html":
        print(found.html_page(), end="")
    else:
        _print(found.report, args)
    if plots_dir:
        for path in found.write_plots(plots_dir):
            print(f"wrote {path}", file=sys.stderr)
    return 1 if found.report.flags else 0


def _say_picked(picked, path: str) -> None:
    """Which run a report without --run took, on stderr (the report itself on stdout)."""
    note = picked.note(path) if picked is not None else None
    if note:
        print(f"report: {note}", file=sys.stderr)


def _print(rep: Report, args: argparse.Namespace) -> None:
    flags = [f.to_json() for f in rep.flags]
    named = {**rep.tables, "flags": flags}
    if args.format == "json":
        out = {**rep.to_json(flags=False), "flags": flags}
        if args.table:
            out = {"run": out["run"], "unit": out["unit"], "warnings": out["warnings"],
                   **({"flags": flags} if args.table == "flags" else {"tables": {args.table: rep.tables[args.table]}})}
        print(json.dumps(out, indent=1, default=str))
    elif args.format == "csv":
        if args.csv_dir:
            _write_csv_dir(args.csv_dir, named)
        if args.table:
            print(render_csv(named[args.table], TABLE_COLUMNS[args.table]), end="")
    else:
        # the whole report leaves out the sections this run has nothing for, named in one line (as the
        # HTML page does); a table asked for by name prints even when empty, and so do the flags
        empty = [n for n in TABLES if not rep.tables[n]] if args.table is None else []
        titles = [(title(n, rep.unit), rep.tables[n]) for n in TABLES if args.table in (None, n) and n not in empty]
        if args.table in (None, "flags"):
            titles.append(("flags", [{"kind": f["kind"], "nodes": f["nodes"], "ranks": f["ranks"],
                                      "message": f["message"], "reasons": f.get("reasons")} for f in flags]))
        left_out = f"(nothing in this run for: {', '.join(empty)})\n" if empty else ""
        print(_header(rep, args.format) + render_tables(titles, args.format, **on_screen(sys.stdout)) + left_out)


def _write_csv_dir(folder: str, named: dict[str, list[dict]]) -> None:
    """Every table to FOLDER/NAME.csv, each written whole under a temporary name, then renamed."""
    try:
        os.makedirs(folder, exist_ok=True)
        for name, rows in named.items():
            path = os.path.join(folder, f"{name}.csv")
            with open(path + ".tmp", "w") as f:
                f.write(render_csv(rows, TABLE_COLUMNS[name]))
            os.replace(path + ".tmp", path)
    except OSError as e:
        raise UsageError(f"--csv-dir {folder}: cannot write there ({e.strerror or e})") from None


def _header(rep: Report, fmt: str = "table") -> str:
    """The run, its versions and hosts, and the warnings; as Markdown from its first line with
    --format markdown (a heading, then a list). Times to the second."""
    r = rep.run
    started = re.sub(r"(\d\d:\d\d:\d\d)\.\d+", r"\1", str(r.get("started_at") or "?"))
    lines = [f"run {r['run_id']} ({r.get('state') or 'state unknown'}), started {started}"]
    if r.get("command") == "import":
        lines.append(f"imported from nccl-tests output by collbench {r.get('collbench_version')}, backend "
                     f"{r.get('backend')}, NCCL {', '.join(r['nccl_versions']) or '-'}")
    elif r.get("collbench_version"):
        lines.append(f"collbench {r.get('collbench_version')}, torch {r.get('torch_version') or '-'}, ray "
                     f"{r.get('ray_version') or '-'}, backend {r.get('backend') or '-'}, NCCL "
                     f"{', '.join(r['nccl_versions']) or '-'}")
    if r.get("collbench_version"):
        lines.append(f"hosts: {', '.join(r.get('hostnames') or [])}; devices: "
                     f"{', '.join(r['gpu_models'] or r.get('device_models') or [])}")
    lines += [f"WARNING: {w}" for w in rep.warnings]
    if fmt == "markdown":
        lines = [f"## {lines[0]}", "", *(f"- {line}" for line in lines[1:])]
    return "\n".join(lines) + "\n\n"
