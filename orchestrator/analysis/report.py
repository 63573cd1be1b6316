"""A run's report as data: the run's header, tables with fixed snake_case names, and flags.
Pure: the command reads the dataset, this builds, `commands.render` formats.

JSON form (docs/guides/report.md): {"run": {...}, "unit": "GBps", "warnings": [...],
"tables": {"busbw": [...], "latency": [...], "peaks": [...], "dtypes": [...], "fits": [...],
"failures": [...], "expected": [...], "intra_vs_inter": [...], "replay_steps": [...],
"replay_groups": [...], "all_to_allv": [...]}, "flags": [{"kind", "nodes",
"ranks", "collective", "msg_bytes", "value", "reference", "message", ...}]}.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from orchestrator.analysis import alltoallv, diagnosis, dispatch, expected, fits, replay, scores, stragglers, uplinks
from orchestrator.analysis import tables as by_size_tables
from orchestrator.analysis.diagnosis import Flag, FlagKind
from orchestrator.analysis.explain import COLUMNS as explain_columns
from orchestrator.analysis.explain import Evidence, Rows, reasons
from orchestrator.analysis.frame import Frame
from orchestrator.judging.defaults import MIN_FRACTION
from orchestrator.results.schema import RunState

# name -> (title, columns scaled by the bandwidth unit)
TABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "busbw": ("busbw ({unit}) by message size, widest group of each topology", ("intra", "inter", "mixed",
                                                                               "intra-domain")),
    "latency": ("time_us by message size, widest group of each topology", ()),
    "peaks": ("peak busbw ({unit}) and the size reaching half of it", ("peak_busbw",)),
    "dtypes": ("dtypes at equal element counts (busbw in {unit})", ("busbw",)),
    "fits": ("latency-bandwidth fits: time = alpha + bytes / bandwidth ({unit}, algorithm bandwidth)", ("bandwidth",)),
    "failures": ("failed, timed-out and skipped groups", ()),
    "expected": ("busbw ({unit}) beside the expected value for the platform (% of expected)", ("busbw", "expected")),
    "intra_vs_inter": ("inside a node vs across nodes (the net_topology column says which network group), "
                       "measured and expected ({unit})",
                       ("intra_busbw", "intra_expected", "net_busbw", "net_expected")),
    "replay_steps": ("replayed steps: communication of the slowest rank per step, and its groups' parts", ()),
    "replay_groups": ("replayed process groups: time per step on the slowest rank, and share", ()),
    "all_to_allv": ("all_to_allv at each group's largest size: its traffic matrix, busbw ({unit}), the busiest "
                    "rank and heaviest pair by bytes, the slowest rank for its bytes", ("busbw",)),
}
# The columns of each table, for the header of an empty one (CSV readers need it); the unit tests
# check them against the rows the tables hold.
COLUMNS: dict[str, tuple[str, ...]] = {
    "busbw": ("collective", "msg_bytes", "size", "intra", "inter", "mixed", "intra/inter"),
    "latency": ("collective", "msg_bytes", "size", "intra", "inter", "mixed"),
    "peaks": ("collective", "topology", "world_size", "peak_busbw", "half_peak_bytes", "half_peak_size"),
    "dtypes": ("collective", "count", "dtype", "msg_bytes", "time_us", "busbw"),
    "fits": ("collective", "topology", "world_size", "sizes", "alpha_us", "bandwidth", "r2", "median_rel_err",
             "max_rel_err", "quality"),
    "failures": ("group_id", "status", "nodes", "failed_ranks", "rows", "error"),
    "expected": ("platform", "collective", "topology", "world_size", "msg_bytes", "size", "busbw", "expected",
                 "pct_of_expected", "transport_class", "meaning", "origin", "source", "reasons"),
    "intra_vs_inter": ("collective", "intra_busbw", "intra_expected", "net_topology", "net_busbw", "net_expected",
                       "measured_ratio", "expected_ratio", "reasons"),
    "replay_steps": replay.STEP_COLUMNS,
    "replay_groups": replay.GROUP_COLUMNS,
    "all_to_allv": alltoallv.COLUMNS,
    "flags": ("kind", "nodes", "ranks", "collective", "msg_bytes", "value", "reference", "message", "source",
              "reasons"),
}
RUN_FIELDS = ("run_id", "state", "started_at", "finished_at", "collbench_version", "torch_version", "ray_version",
              "nccl_version", "gpu_driver", "python_version", "backend", "hostnames", "device_models", "command_line",
              "command",
              # the build NCCL ran with (issue 34), as the manifest keeps it
              "nccl_git_hash", "nccl_net_plugin", "nccl_tuner_plugin", "nccl_profiler_plugin", "nccl_cta_policy")


@dataclass
class Report:
    run: dict
    unit: str
    tables: dict[str, list[dict]]
    flags: list[Flag]
    warnings: list[str] = field(default_factory=list)

    def to_json(self, flags: bool = True) -> dict:
        """The report as JSON data (flags=False: without its flags, for a caller that has them)."""
        return {"run": self.run, "unit": self.unit, "warnings": self.warnings, "tables": self.tables,
                **({"flags": [f.to_json() for f in self.flags]} if flags else {})}

    def frame(self, name: str):
        """Table `name` (TABLES, or "flags") as a pandas DataFrame, with its columns even when empty."""
        if name not in COLUMNS:
            raise KeyError(f"no table {name!r} (tables: {', '.join(COLUMNS)})")
        rows = [f.to_json() for f in self.flags] if name == "flags" else self.tables[name]
        return pd.DataFrame(rows, columns=list(dict.fromkeys([*COLUMNS[name], *(k for r in rows for k in r)])))


def run_header(frame: Frame, manifest: dict | None, manifest_problem: str | None = None) -> tuple[dict, list[str]]:
    """The run's fields (every one of RUN_FIELDS, null where unknown) and warnings."""
    df = frame.df
    run = {k: None for k in RUN_FIELDS}
    run["run_id"] = df.run_id.iloc[0]
    warnings = []
    if manifest_problem:
        warnings.append(f"{manifest_problem}: versions and hosts unknown")
    elif manifest is None:
        warnings.append("no manifest for this run (versions and hosts unknown)")
    if manifest is not None:
        run.update({k: manifest[k] for k in RUN_FIELDS if manifest.get(k) is not None})
        state = manifest.get("state")
        again = f"resume it with collbench run --resume {run['run_id']}" if manifest.get("command") in (
            None, "run") else f"a {manifest['command']} run has no resume: run it again"
        if state == RunState.RUNNING and manifest.get("driver_gone"):
            warnings.append(f"the run's driver is gone, killed without marking its manifest (its lock, held by "
                            f"{manifest['driver_gone']}, is free): the report covers the groups on disk; {again}")
        elif state == RunState.RUNNING:
            warnings.append("the run is still running, or its driver died: the report covers the groups on disk so far")
        elif state == RunState.FAILED:
            warnings.append("the run failed (an error it could not handle, said by its driver): the report covers "
                            "the groups on disk")
        elif state == RunState.INTERRUPTED:
            how = f" ({manifest['ended_by']})" if manifest.get("ended_by") else ""
            done, total = manifest.get("groups_done"), manifest.get("groups_total")
            of = f" of {total}" if total and (done is None or total >= done) else ""  # a qualification's: as it ran
            warnings.append(f"the run was interrupted after {done}{of} groups{how}: {again}")
    run["gpu_models"] = sorted(set(df.gpu_model.dropna())) if "gpu_model" in df else []
    run["nccl_versions"] = sorted(set(df.nccl_version.dropna())) if "nccl_version" in df else []
    return run, warnings


def entries(manifest: dict | None, user: list[expected.Entry]) -> list[expected.Entry]:
    """The user's entries, those the cluster declared (in the manifest), and the shipped table."""
    declared = json.loads(manifest["expected"]) if manifest and manifest.get("expected") else []
    return [*user, *expected.parse(declared, "the run's manifest", "declared"), *expected.shipped()]


def build(frame: Frame, manifest: dict | None, threshold: float, unit: str, scale: float,
          collective: str | None = None, user_entries: list[expected.Entry] = (),
          min_fraction: float = MIN_FRACTION, manifest_problem: str | None = None) -> Report:
    df = frame.df
    collectives = [collective] if collective else [c for c in df.collective.unique() if isinstance(c, str)]
    facts = _doctor_facts(manifest)
    known = entries(manifest, list(user_entries))
    # The judges read the frame and write nothing: on threads they overlap, since numpy and pandas'
    # group-bys release the GIL (a million rows: 2.1 s one after another, 1.0 s on 2 cores).
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        peers = pool.submit(diagnosis.judge, frame, threshold)
        late = pool.submit(stragglers.flags, frame, threshold)
        judging = pool.submit(expected.evaluate, frame, known, min_fraction, facts)
        fitted = pool.submit(fits.fits, df)
        tables = _size_tables(df, collectives)
        tables["fits"] = [f for f in fitted.result() if f["collective"] in collectives]
        found, agreed = peers.result()
        found = found + late.result()
        judged = judging.result()
    if collective:
        found = [f for f in found if f.collective in (collective, None)]
    tables["failures"] = diagnosis.failure_table(found)
    on_node = _RowsOnNodes(frame) if any(_explains(f) for f in found) else None  # built once, if needed
    found = [explained(f, frame, facts, on_node) for f in found]
    tables["expected"] = [r for r in judged.table if r["collective"] in collectives]
    tables["intra_vs_inter"] = expected.intra_vs_inter(tables["expected"])
    found += [f for f in judged.flags if f.collective in collectives]
    if "step" in df and df.step.notna().any():
        tables.update(replay.tables(frame.replay_rows()))
    tables["all_to_allv"] = alltoallv.table(frame) if alltoallv.NAME in collectives else []
    for name, (_, scaled) in TABLES.items():
        tables[name] = [{k: v * scale if k in scaled and isinstance(v, float) else v for k, v in r.items()}
                        for r in tables[name]]
    run, warnings = run_header(frame, manifest, manifest_problem)
    warnings += [line] if (line := dispatch.warning(df)) else []
    for platform in judged.uncovered:
        warnings.append(f"no expected value covers platform {platform or 'unknown'}: busbw is judged against "
                        "its peers only (add entries with --expected FILE)")
    if agreed and judged.uncovered and not judged.flags:
        warnings.append(agreed)  # never a bare "nothing flagged" where only peers could judge
    if frame.leaves:
        warnings += uplinks.unjudged(scores.shape_scores(df), frame.leaves)
    return Report(run, unit, tables, found, warnings)


def _size_tables(df: pd.DataFrame, collectives: list[str]) -> dict[str, list[dict]]:
    """Every table (empty), with those by message size filled for each collective."""
    tables: dict[str, list[dict]] = {name: [] for name in TABLES}
    for coll in collectives:
        busbw = by_size_tables.by_size(df, coll, "busbw_gbps")
        tables["busbw"] += busbw
        tables["latency"] += by_size_tables.by_size(df, coll, "time_us")
        tables["peaks"] += by_size_tables.peaks(df, coll, busbw)
        tables["dtypes"] += by_size_tables.precision(df, coll)
    for row in tables["busbw"]:
        row["intra/inter"] = row["intra"] / row["inter"] if row["intra"] and row["inter"] else None
    return tables


def _doctor_facts(manifest: dict | None) -> dict[str, dict]:
    """The nodes' facts the run's quick doctor read (by IP), where the manifest has them."""
    try:
        return json.loads(manifest["doctor"]) if manifest and manifest.get("doctor") else {}
    except (TypeError, ValueError):
        return {}


_UNSIZED = 1 << 62  # a row without msg_bytes: after every size of its collective, never a size's own


class _RowsOnNodes:
    """The ok rows whose group starts or ends on given nodes, with their evidence taken from arrays
    (a report of thousands of flags scans the run once, not once per flag, and builds no DataFrame
    per flag). Each node's rows are copied together, in (collective, msg_bytes) order, so that its
    rows of one collective at one size, or above it, are one contiguous slice: a flag's evidence
    reads a few thousand neighbouring values, not as many scattered over the run."""

    def __init__(self, frame: Frame) -> None:
        ok = scores.ok_rows(frame.df)
        collective = ok.collective.astype("category")
        codes = collective.cat.codes.to_numpy().astype(np.int64)  # int64 as the searched values, so
        sizes = ok.msg_bytes  # that no search copies them
        sizes = (sizes.fillna(_UNSIZED) if sizes.isna().any() else sizes).to_numpy(dtype=np.int64)
        order = np.lexsort((sizes, codes))
        ok = ok.iloc[order]
        self._collectives = {c: i for i, c in enumerate(collective.cat.categories)}
        self._keys = codes[order], sizes[order]  # sorted
        first, last = ok.node_first.to_numpy(), ok.node_last.to_numpy()
        across = np.flatnonzero(last != first)  # a group inside one node is on its list once
        codes = np.concatenate([first, last[across]])
        positions = np.concatenate([np.arange(len(ok)), across])
        by_node = np.lexsort((positions, codes))
        self._row_of, self._bounds = positions[by_node], np.searchsorted(codes[by_node],
                                                                          np.arange(len(frame.nodes) + 1))
        self.rows = Rows(ok[[c for c in explain_columns if c in ok]].iloc[self._row_of], order[self._row_of])
        self._codes = {ip: i for i, ip in enumerate(frame.nodes)}

    def _rank(self, collective: int, msg_bytes: int, side: str) -> int:
        """Where (collective, msg_bytes) falls in the sorted rows."""
        codes, sizes = self._keys
        lo, hi = np.searchsorted(codes, collective, "left"), np.searchsorted(codes, collective, "right")
        return int(lo + np.searchsorted(sizes[lo:hi], msg_bytes, side))

    def evidence(self, flag: Flag) -> Evidence:
        """The evidence of the flag's collective at its size on its nodes (all sizes where it names
        none), and of the larger sizes'."""
        mine, bigger = [], []
        if not flag.collective or flag.collective not in self._collectives:  # no rows to read
            return self.rows.evidence(self._once(mine), self._once(bigger))
        coll, size = self._collectives[flag.collective], flag.msg_bytes
        start = self._rank(coll, np.iinfo(np.int64).min if size is None else size, "left")
        middle = self._rank(coll, _UNSIZED if size is None else size, "right")  # no size: every row
        bigger_from, bigger_to = self._rank(coll, size or 0, "right"), self._rank(coll, _UNSIZED, "left")
        for ip in flag.nodes:
            if ip in self._codes:
                lo, hi = self._bounds[self._codes[ip]], self._bounds[self._codes[ip] + 1]
                i, j, k, m = lo + np.searchsorted(self._row_of[lo:hi], [start, middle, bigger_from, bigger_to])
                mine.append(np.arange(i, j))
                bigger.append(np.arange(k, m))
        return self.rows.evidence(self._once(mine), self._once(bigger))

    def _once(self, parts: list[np.ndarray]) -> np.ndarray:
        """The entries of `parts`, each row once (a group on two of the nodes is in both their slices)."""
        if len(parts) < 2:
            return parts[0] if parts else np.array([], np.int64)
        entries = np.concatenate(parts)
        by_row = np.argsort(self._row_of[entries], kind="stable")
        rows = self._row_of[entries[by_row]]
        return entries[by_row[np.r_[True, rows[1:] != rows[:-1]]]] if len(rows) else entries


def explained(flag: Flag, frame: Frame, facts: dict[str, dict], on_node: _RowsOnNodes | None = None) -> Flag:
    """A peer flag (slow pair, node, rail, GPU pair, group; straggler) with the reasons its rows
    and the nodes' facts give; a failed group's flag is its error, and stays as it is."""
    if not _explains(flag):
        return flag
    why = reasons((on_node or _RowsOnNodes(frame)).evidence(flag), flag.nodes, None, facts)
    return Flag(**{**flag.__dict__, "extra": {**flag.extra, "reasons": [r.to_json() for r in why]}})


def _explains(flag: Flag) -> bool:
    return flag.kind != FlagKind.FAILED_GROUP and "reasons" not in flag.extra


def title(name: str, unit: str) -> str:
    return TABLES[name][0].format(unit=unit)
