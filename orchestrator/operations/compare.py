"""Two stored runs compared link by link (or shape by shape): which runs are the baseline, and
what matched, changed and was flagged (`collbench compare` and `api.compare`; `watch` finds its
earlier cycles of the same sweep here)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

import pandas as pd
import pyarrow as pa

from orchestrator.analysis import compare as comparing
from orchestrator.errors import UsageError
from orchestrator.judging.defaults import DROP_THRESHOLD
from orchestrator.judging.judge import Source
from orchestrator.operations.checks import UNITS, Unit, check_threshold
from orchestrator.results import dataset

By = Literal["link", "shape"]
# Spec fields that say where and how patiently a sweep ran, not what it measured: two runs that
# differ only in these are runs of the same sweep.
NOT_THE_SWEEP = ("output", "address", "verbose", "group_timeout_s", "deadline_rate_gbps", "allow_failures", "nodes", "exclude",
                 "wait_nodes")


# compare's exit code by verdict (2 stays a usage error's): an inconclusive comparison is neither a
# pass nor a drop, and says so to a gate; `compare --accept-inconclusive` takes it as unchanged
EXIT_CODES = {comparing.Verdict.UNCHANGED: 0, comparing.Verdict.DROPPED: 1, comparing.Verdict.INCONCLUSIVE: 3}


@dataclass(frozen=True, kw_only=True)
class CompareOptions:
    """What to compare, checked when made."""

    baseline: str
    """The results dataset of the baseline."""
    new: str | None = None
    """The results dataset of the new run; None: the baseline's own (two of its runs compared)."""
    baseline_runs: tuple[str, ...] = ()
    """Baseline run ids; empty: the baseline's latest run, with every other run of its sweep."""
    new_run: str | None = None
    """The new run; None: the new dataset's latest, not a baseline run."""
    threshold: float = DROP_THRESHOLD
    """Flag a busbw drop beyond this fraction (and beyond the noise between runs)."""
    by: By = "link"
    """Match groups by their devices as well as their shape (link), or by shape only (two clusters)."""

    def __post_init__(self) -> None:
        check_threshold(self.threshold)
        if self.by not in ("link", "shape"):
            raise UsageError(f"--by {self.by!r}: link or shape")


@dataclass
class Comparison:
    """Matched keys with their changes, noise and flag, keys on one side only, and which runs."""

    matched: pd.DataFrame
    only_in_baseline: pd.DataFrame
    only_in_new: pd.DataFrame
    baseline_runs: list[str]
    new_run: str
    by: str
    conclusion: comparing.Conclusion
    picked: list[str] = field(default_factory=list)  # which runs were taken where none was named, in words

    @property
    def flagged(self) -> pd.DataFrame:
        return self.matched[self.matched.flag]

    @property
    def inconclusive(self) -> bool:
        return self.conclusion.verdict is comparing.Verdict.INCONCLUSIVE

    @property
    def exit_code(self) -> int:
        """The verdict's own exit code (EXIT_CODES): a gate cannot take an inconclusive comparison for
        an unchanged one."""
        return EXIT_CODES[self.conclusion.verdict]

    def rows(self, unit: Unit = "GBps") -> list[dict]:
        """The matched keys as the command prints them: the key (its link with --by link), busbw
        before and after in `unit`, the changes, the noise floor and where it was read, the regime
        and the flag ("DROP" or "")."""
        scale = UNITS[unit]
        key = comparing.SHAPE_KEY + (["link"] if self.by == "link" else [])
        return [{**{k: r[k] for k in key}, "busbw_base": r.busbw_gbps_base * scale,
                 "busbw_new": r.busbw_gbps_new * scale, "busbw_change": r.busbw_change, "time_change": r.time_change,
                 "noise_floor": r.noise_floor, "noise_source": r.noise_source, "regime": r.regime,
                 "flag": "DROP" if r.flag else ""} for _, r in self.matched.iterrows()]

    def summary(self, unit: Unit = "GBps") -> dict:
        """One record of the comparison: its verdict and why, which runs, how many keys matched and
        were flagged, the median and worst change, where the noise was read, and what matched on
        one side only."""
        sources = self.matched.noise_source.value_counts()
        return {
            "verdict": self.conclusion.verdict.value, "why": "; ".join(self.conclusion.reasons),
            "baseline_run": self.baseline_runs[-1], "new_run": self.new_run, "baseline_runs": self.baseline_runs,
            "by": self.by, "matched": len(self.matched), "flagged_drops": int(self.matched.flag.sum()), "unit": unit,
            "median_busbw_change": float(self.matched.busbw_change.median()),
            "worst_busbw_change": float(self.matched.busbw_change.min()),
            **{f"noise_{s}": int(sources.get(s, 0)) for s in [*(s.value for s in Source), "iterations"]},
            "only_in_baseline": len(self.only_in_baseline), "only_in_new": len(self.only_in_new),
        }


def compare(options: CompareOptions) -> Comparison:
    """Compare the new run with the baseline run(s); UsageError when nothing matches."""
    baseline, new, by = options.baseline, options.new or options.baseline, options.by
    base_runs, new_run, picked = pick_runs(baseline, new, options.baseline_runs, options.new_run)
    base = pa.concat_tables([dataset.load_table(baseline, r, columns=comparing.COLUMNS) for r in base_runs])
    new_table = dataset.load_table(new, new_run, columns=comparing.COLUMNS)
    matched, only_base, only_new = comparing.compare(base, new_table, options.threshold, by)
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
    return Comparison(matched, only_base, only_new, base_runs, new_run, by,
                      comparing.conclusion(matched, base, new_table), picked)


def pick_runs(baseline: str, new: str, baseline_runs: tuple[str, ...] = (), new_run: str | None = None
              ) -> tuple[list[str], str, list[str]]:
    """(Baseline run ids, oldest first; the new run id; what was taken where nothing was named, in
    words) from the options and the datasets. Unnamed, the new run is the new dataset's latest sweep
    (a newer qualify or watch run passed over: dataset.latest_sweep), and the baseline every other run
    of its sweep (sweep_key: the same command and spec); in one dataset a run of another sweep is no
    baseline (one line says so), across two the baseline's latest sweep stands in where none matches."""
    same = baseline == new
    base_known = dataset.runs(baseline)
    new_known = base_known if same else dataset.runs(new)
    named = [r.strip() for r in baseline_runs]
    notes: list[str] = []
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
        pick = dataset.latest_sweep(new, candidates)
        new_run = pick.run_id
        if pick.passed_over:
            notes.append(f"new {pick.note(new)}")
    if named:
        return list(dict.fromkeys(named)), new_run, notes
    candidates = [r for r in base_known if not (same and r == new_run)]
    if not candidates:
        raise UsageError(f"{baseline}: holds {len(base_known)} run(s); name two with --baseline-run/--new-run")
    mine = sweep_of(new, new_run)
    if mine is not None:
        matching = [r for r in candidates if sweep_of(baseline, r) == mine]
        if matching:
            return matching, new_run, notes
        if same:
            raise UsageError(f"{baseline}: no other run of the sweep of run {new_run} ({mine[0] or 'command unknown'}"
                             f" with the same options) to compare with among its {len(candidates)} other run(s); "
                             "name one with --baseline-run")
    primary = dataset.latest_sweep(baseline, candidates).run_id
    sweep = sweep_of(baseline, primary)
    if mine is not None:
        notes.append(f"baseline run {primary}: the latest sweep in {baseline}; none there is of the new run's sweep")
    if sweep is None:
        return [primary], new_run, notes
    return [r for r in candidates if r == primary or sweep_of(baseline, r) == sweep], new_run, notes


def sweep_key(command: str | None, spec: dict) -> tuple[str | None, str]:
    """What a run measured, as one comparable value: its command and its spec less NOT_THE_SWEEP."""
    return command, json.dumps({k: v for k, v in spec.items() if k not in NOT_THE_SWEEP}, sort_keys=True)


def sweep_of(path: str, run_id: str) -> tuple[str | None, str] | None:
    """The sweep_key of a stored run, from its manifest; None when unknown."""
    m = dataset.manifest(path, run_id)
    try:
        spec = json.loads(m["spec"]) if m and m.get("spec") else None
    except ValueError:
        return None
    if not isinstance(spec, dict):
        return None
    return sweep_key(m.get("command"), spec)


def _check_run(option: str, run_id: str, path: str, known: list[str]) -> str:
    if run_id not in known:
        shown = run_id if run_id.strip() and run_id.isprintable() else repr(run_id)
        raise UsageError(f"{option} {shown}: no such run in {path} (runs: {', '.join(known[-5:]) or 'none'})")
    return run_id
