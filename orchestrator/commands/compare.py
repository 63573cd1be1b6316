"""`collbench compare BASELINE NEW`: busbw and time per matched link or shape, drops flagged
only beyond the run-to-run noise: read from several baseline runs of the same sweep when there
are, else from the spread of the changes of a shape's links (where larger, the rows' own
iterations); a row with neither is not judged, and said so.

Exit 1 when a drop exceeds --threshold and its noise (a gate for driver or NCCL upgrades), 2 for
unusable input, including two runs with no row in common. Never touches Ray or torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa

from orchestrator.analysis.compare import COLUMNS, SHAPE_KEY, compare
from orchestrator.analysis.noise import MIN_PEERS, NoiseSource
from orchestrator.commands.options import UNITS, add_analysis_options, check_threshold
from orchestrator.commands.render import render_csv, render_tables
from orchestrator.errors import UsageError
from orchestrator.results import dataset

TABLE_NAMES = ("summary", "matched", "only_in_baseline", "only_in_new")
# Spec fields that say where and how patiently a sweep ran, not what it measured: two runs that
# differ only in these are runs of the same sweep.
_NOT_THE_SWEEP = ("output", "address", "group_timeout_s", "deadline_rate_gbps", "allow_failures", "nodes", "exclude")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="compare two runs link by link and flag busbw drops beyond run-to-run noise",
        description="Match rows of two runs by shape (collective, dtype, op, in_place, msg_bytes, topology, "
        "world_size, ranks_per_node, pattern) and by link (the group's node IPs and local ranks; --by shape pools "
        "a shape's groups); print the change of busbw and time and the noise floor, and exit 1 when a drop exceeds "
        "--threshold and the noise between runs: read from several baseline runs (every run of the baseline's sweep "
        "in BASELINE, or those named), else from how the shape's other links moved, else from the rows' "
        "per-iteration times (the noise_source column says which). With the same PATH twice and no run ids, the "
        "latest run is compared with the runs before it.",
    )
    p.add_argument("baseline", help="results dataset of the baseline")
    p.add_argument("new", help="results dataset of the new run")
    p.add_argument("--baseline-run", metavar="RUN_ID[,RUN_ID...]",
                   help="baseline run(s) in BASELINE, comma-separated (default: its latest run, with every other run "
                   "of the same command and sweep in BASELINE; the new run itself excluded)")
    p.add_argument("--new-run", metavar="RUN_ID", help="run in NEW (default: its latest, not a baseline run)")
    p.add_argument("--by", choices=["link", "shape"], default="link",
                   help="match groups by their devices as well as their shape (link, default), or by shape only "
                   "(shape: two different clusters)")
    p.add_argument("--table", choices=TABLE_NAMES, metavar="NAME",
                   help="print only this table: " + ", ".join(TABLE_NAMES) + " (with --format csv: plain CSV)")
    add_analysis_options(p, threshold=0.05)
    p.set_defaults(handler=main)


def _check_run(option: str, run_id: str, path: str, known: list[str]) -> str:
    if run_id not in known:
        shown = run_id if run_id.strip() and run_id.isprintable() else repr(run_id)
        raise UsageError(f"{option} {shown}: no such run in {path} (runs: {', '.join(known[-5:]) or 'none'})")
    return run_id


def _sweep(path: str, run_id: str) -> tuple | None:
    """What a run measured (its command and spec, less where and how patiently), None when unknown."""
    m = dataset.manifest(path, run_id)
    try:
        spec = json.loads(m["spec"]) if m and m.get("spec") else None
    except ValueError:
        return None
    if not isinstance(spec, dict):
        return None
    return m.get("command"), json.dumps({k: v for k, v in spec.items() if k not in _NOT_THE_SWEEP}, sort_keys=True)


def pick_runs(baseline: str, new: str, baseline_run: str | None = None, new_run: str | None = None
              ) -> tuple[list[str], str]:
    """(Baseline run ids, oldest first; the new run id) from the options and the datasets."""
    same = baseline == new
    base_known = dataset.runs(baseline)
    new_known = base_known if same else dataset.runs(new)
    named = [r.strip() for r in baseline_run.split(",")] if baseline_run is not None else []
    for r in named:
        _check_run("--baseline-run", r, baseline, base_known)
    if new_run is not None:
        new_run = _check_run("--new-run", new_run, new, new_known)
        if new_run in named:  # run ids are unique: the same id in two folders is one run copied
            raise UsageError(f"--new-run {new_run}: is also a --baseline-run; a run compared with itself shows nothing")
    else:
        candidates = [r for r in new_known if not (same and r in named)]
        if not candidates:
            raise UsageError(f"{new}: holds no run besides the baseline run(s); name one with --new-run")
        new_run = candidates[-1]
    if named:
        return list(dict.fromkeys(named)), new_run
    candidates = [r for r in base_known if not (same and r == new_run)]
    if not candidates:
        raise UsageError(f"{baseline}: holds {len(base_known)} run(s); name two with --baseline-run/--new-run")
    primary = candidates[-1]
    sweep = _sweep(baseline, primary)
    if sweep is None:
        return [primary], new_run
    return [r for r in candidates if r == primary or _sweep(baseline, r) == sweep], new_run


@dataclass
class Comparison:
    """Matched keys with their changes, noise and flag, keys on one side only, and which runs."""

    matched: pd.DataFrame
    only_in_baseline: pd.DataFrame
    only_in_new: pd.DataFrame
    baseline_runs: list[str]
    new_run: str
    by: str

    @property
    def flagged(self) -> pd.DataFrame:
        return self.matched[self.matched.flag]


def comparison(baseline: str, new: str, baseline_run: str | None = None, new_run: str | None = None,
               threshold: float = 0.05, by: str = "link") -> Comparison:
    """Compare the new run with the baseline run(s); UsageError when nothing matches."""
    base_runs, new_run = pick_runs(baseline, new, baseline_run, new_run)
    base = pa.concat_tables([dataset.load_table(baseline, r, columns=COLUMNS) for r in base_runs])
    matched, only_base, only_new = compare(base, dataset.load_table(new, new_run, columns=COLUMNS), threshold, by)
    if matched.empty:
        if only_new.empty:
            why = f"run {new_run} has no ok row"
        elif only_base.empty:
            why = f"baseline run(s) {','.join(base_runs)} have no ok row"
        else:
            why = f"no ok row of run {new_run} matches one of baseline run(s) {','.join(base_runs)} by {by}"
        raise UsageError(f"{why}: nothing to compare" + (" (another cluster? --by shape)"
                                                         if by == "link" and not only_new.empty
                                                         and not only_base.empty else ""))
    return Comparison(matched, only_base, only_new, base_runs, new_run, by)


def main(args: argparse.Namespace) -> int:
    check_threshold(args.threshold)
    if args.format == "csv" and not args.table:
        raise UsageError("--format csv: name one table with --table NAME")
    found = comparison(args.baseline, args.new, args.baseline_run, args.new_run, args.threshold, args.by)
    matched, only_base, only_new = found.matched, found.only_in_baseline, found.only_in_new
    base_runs, new_run = found.baseline_runs, found.new_run
    scale = UNITS[args.unit]
    key = SHAPE_KEY + (["link"] if args.by == "link" else [])
    rows = [
        {**{k: r[k] for k in key}, "busbw_base": r.busbw_gbps_base * scale, "busbw_new": r.busbw_gbps_new * scale,
         "busbw_change": r.busbw_change, "time_change": r.time_change, "noise_floor": r.noise_floor,
         "noise_source": r.noise_source, "flag": "DROP" if r.flag else ""}
        for _, r in matched.iterrows()
    ]
    flagged = int(matched.flag.sum())
    sources = matched.noise_source.value_counts()
    summary = [{
        "baseline_run": base_runs[-1], "new_run": new_run, "baseline_runs": base_runs, "by": args.by,
        "matched": len(matched), "flagged_drops": flagged, "unit": args.unit,
        "median_busbw_change": float(matched.busbw_change.median()),
        "worst_busbw_change": float(matched.busbw_change.min()),
        **{f"noise_{s.value}": int(sources.get(s.value, 0)) for s in NoiseSource},
        "only_in_baseline": len(only_base), "only_in_new": len(only_new),
    }]
    tables = {"summary": summary, "matched": rows, "only_in_baseline": only_base.to_dict("records"),
              "only_in_new": only_new.to_dict("records")}
    unjudged = int(sources.get(NoiseSource.UNJUDGED.value, 0))
    if unjudged:
        print(f"collbench: {unjudged} of {len(matched)} matched row(s) not judged (noise_source unjudged): their "
              f"shape has fewer than {MIN_PEERS} links and there is one baseline run, so nothing says how far a "
              "healthy link moves between runs; run the baseline sweep again and compare with every run "
              "(--baseline-run A,B,C)", file=sys.stderr)
    if args.table:
        tables = {args.table: tables[args.table]}
    if args.format == "json":
        print(json.dumps({"tables": tables}, indent=1, default=str))
    elif args.format == "csv":
        print(render_csv(tables[args.table]), end="")
    else:
        titles = {"summary": "summary", "matched": f"matched rows (busbw in {args.unit}; DROP: below -{args.threshold:.0%} "
                  "and beyond the noise floor, read from noise_source)", "only_in_baseline": "rows only in the baseline",
                  "only_in_new": "rows only in the new run"}
        print(render_tables([(titles[n], t) for n, t in tables.items()], args.format))
    return 1 if flagged else 0
