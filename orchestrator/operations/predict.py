"""`collbench predict` and `api.predict`: the per-step communication time of a training layout
(or of a traced job's ops), priced from a measured run's alpha-beta fits (analysis/predict.py),
with a what-if layout or another dataset's fits beside it. Checks and pricing here, once, for both
faces; the command renders what it returns."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from orchestrator.analysis import predict as pricing
from orchestrator.errors import UsageError
from orchestrator.operations.predict_fits import Predicted, fit_rows
from orchestrator.results import dataset
from orchestrator.sweep.sizes import format_bytes, parse_bytes
from orchestrator.sweep.spec import MAX_MSG_BYTES
from workloads.dtypes import ELEMENT_BYTES

DESCRIPTION = pricing.__doc__  # what `collbench predict --help` says of it
DTYPES = tuple(ELEMENT_BYTES)  # what --dtype may name

_SUFFIX = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
# Bounds that keep the arithmetic finite and quick (a group's ranks are listed to find its
# topology): a million-rank layout is far past any cluster.
LIMITS = {"dp": 1 << 20, "tp": 1 << 20, "pp": 1 << 20, "layers": 1 << 20, "hidden": 1 << 30, "seq": 1 << 30,
          "micro_batch": 1 << 20, "micro_batches": 1 << 20, "ranks_per_node": 1 << 10}
MAX_PARAMS = 1e15
RANKS_PER_NODE = 8
BUCKET_BYTES = 25 << 20  # DDP's bucket_cap_mb=25 is 25 MiB
BUCKET_RANGE = f"1 to {format_bytes(MAX_MSG_BYTES)} (default: {format_bytes(BUCKET_BYTES)})"  # --bucket's help
WHAT_IF_KEYS = ("dp", "tp", "pp", "layers", "hidden", "seq", "micro-batch", "micro-batches", "ranks-per-node",
                "params", "bucket", "dtype", "fsdp")
OLD_WHAT_IF_KEYS = {"gpus-per-node": "ranks-per-node", "bucket-mb": "bucket"}  # taken until the next release
_FIELD_OF_KEY = {"bucket": "bucket_bytes", "bucket-mb": "bucket_bytes", "gpus-per-node": "ranks_per_node"}


def parse_count(text: str) -> float:
    """7e9, 7B, 1.5T, 350M -> a number of parameters; ValueError otherwise."""
    t = text.strip().upper()
    return float(t[:-1]) * _SUFFIX[t[-1]] if t and t[-1] in _SUFFIX else float(t)


def mb_to_bytes(mb: float) -> int:
    """--bucket-mb's meaning, kept for its last release: MB of 1e6 bytes, at least one byte."""
    if not 1e-6 <= mb <= MAX_MSG_BYTES / 1e6:  # nan too
        raise ValueError(mb)
    return max(1, round(mb * 1e6))


@dataclass(frozen=True, kw_only=True)
class PredictOptions:
    """What to price and from which fits, checked when made (in the command's order: a traced job
    or a layout, what goes with which, then the layout's own bounds)."""

    path: str
    """The results dataset whose fits price the ops."""
    run: str | None = None
    """The run whose fits to use; None: the latest."""
    params: float | None = None
    """Model parameters (a layout); needed unless `trace`."""
    dp: int = 1
    tp: int = 1
    pp: int = 1
    layers: int = 32
    hidden: int = 4096
    seq: int = 4096
    micro_batch: int = 1
    micro_batches: int = 1
    ranks_per_node: int = RANKS_PER_NODE
    """Ranks (GPUs) per node of the layout, or of the traced job's placement."""
    fsdp: bool = False
    dtype: str = "bfloat16"
    bucket_bytes: int = BUCKET_BYTES
    what_if: tuple[str, ...] = ()
    """KEY=VALUE changes of the layout, priced beside it (WHAT_IF_KEYS)."""
    what_if_results: tuple[str, ...] = ()
    """PATH [RUN_ID]: price the what-if from another dataset's fits."""
    trace: tuple[str, ...] = field(default=())
    """Instead of a layout, a real job's Flight Recorder dumps (files or folders)."""
    ops_per_step: int | None = None
    replay_run: str | None = None
    """With `trace`: a replay run of the same dumps in the same dataset, shown beside."""

    def __post_init__(self) -> None:
        if self.trace:
            if self.what_if or self.what_if_results:
                raise UsageError("--what-if: with a layout (--params ...), not with --trace")
            if not 1 <= self.ranks_per_node <= LIMITS["ranks_per_node"]:
                raise UsageError(f"--ranks-per-node {self.ranks_per_node}: must be between 1 and "
                                 f"{LIMITS['ranks_per_node']}")
            return
        if self.replay_run or self.ops_per_step is not None:
            raise UsageError(f"--{'replay-run' if self.replay_run else 'ops-per-step'}: only with --trace")
        if len(self.what_if_results) > 2:
            raise UsageError(f"--what-if-results {' '.join(self.what_if_results)}: PATH and at most one RUN_ID")
        if self.params is None:
            raise UsageError("--params: required (the model's parameters), unless --trace prices a real job's ops")
        self._check_layout()

    def _check_layout(self) -> None:
        for name, high in LIMITS.items():
            value = getattr(self, name)
            if not 1 <= value <= high:
                shown = value if abs(value) < 10**30 else f"{str(value)[:12]}... ({len(str(value))} digits)"
                raise UsageError(f"--{name.replace('_', '-')} {shown}: must be between 1 and {high}")
        if self.dp * self.tp * self.pp > 1 << 30:
            raise UsageError(f"--dp {self.dp} x --tp {self.tp} x --pp {self.pp}: more than {1 << 30} ranks")
        if not 0 < self.params <= MAX_PARAMS:  # nan and inf too
            raise UsageError(f"--params {self.params:g}: must be positive, at most {MAX_PARAMS:g}")
        if not 1 <= self.bucket_bytes <= MAX_MSG_BYTES:
            raise UsageError(f"--bucket {self.bucket_bytes}: must be between 1 and {MAX_MSG_BYTES} bytes "
                             f"({format_bytes(MAX_MSG_BYTES)})")
        if self.tp % self.ranks_per_node and self.ranks_per_node % self.tp:
            raise UsageError(f"--tp {self.tp}: neither divides nor is a multiple of --ranks-per-node "
                             f"{self.ranks_per_node}, so tensor-parallel groups would straddle nodes unevenly")
        if self.pp > self.layers:
            raise UsageError(f"--pp {self.pp}: more pipeline stages than --layers {self.layers}")
        if self.layers % self.pp:
            raise UsageError(f"--pp {self.pp}: does not divide --layers {self.layers} into equal stages")

    def changed(self) -> tuple[PredictOptions, list[tuple[str, str]]]:
        """The layout with the what-if's KEY=VALUE changes, checked as the layout is, and the old
        keys used (old, new) to be said once all is valid."""
        changes, said = {}, []
        for item in self.what_if:
            key, sep, value = item.partition("=")
            if not sep or key not in (*WHAT_IF_KEYS, *OLD_WHAT_IF_KEYS):
                raise UsageError(f"--what-if {item}: expected KEY=VALUE with KEY one of {', '.join(WHAT_IF_KEYS)}")
            if key in OLD_WHAT_IF_KEYS:
                said.append((f"--what-if {key}", OLD_WHAT_IF_KEYS[key]))
            try:
                changes[_FIELD_OF_KEY.get(key, key.replace("-", "_"))] = _what_if_value(key, value)
            except (ValueError, KeyError):
                raise UsageError(f"--what-if {item}: {value!r} is not a value for {key}") from None
        try:
            return dataclasses.replace(self, what_if=(), what_if_results=(), **changes), said
        except UsageError as e:
            raise UsageError(f"--what-if: {e}") from None


def _what_if_value(key: str, value: str):
    if key == "params":
        return parse_count(value)
    if key == "bucket":
        return parse_bytes(value)
    if key == "bucket-mb":
        return mb_to_bytes(float(value))
    if key == "dtype":
        if value not in ELEMENT_BYTES:
            raise ValueError(value)
        return value
    if key == "fsdp":
        return {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}[value.lower()]
    return int(value)


def predict(options: PredictOptions) -> Predicted:
    if options.trace:
        from orchestrator.operations.predict_trace import predict_trace

        return predict_trace(options)
    return _predict_layout(options)


def _predict_layout(options: PredictOptions) -> Predicted:
    picked: list[str] = []
    fits_df = fit_rows(options.path, options.run, picked)
    summary, terms = _priced(options, *pricing.fit_tables(fits_df), fits_df.run_id.iloc[0])
    tables = {"summary": [summary], "terms": terms}
    titled = [("per-step communication", [summary]), ("terms", terms)]
    said: list[tuple[str, str]] = []
    if options.what_if or options.what_if_results:
        what_if, said = options.changed()
        other = fit_rows(options.what_if_results[0], (list(options.what_if_results[1:]) or [None])[0], picked) \
            if options.what_if_results else fits_df
        summary2, terms2 = _priced(what_if, *pricing.fit_tables(other), other.run_id.iloc[0])
        summary2["what_if"] = " ".join(options.what_if) + (f" fits of {options.what_if_results[0]} run "
                                                           f"{summary2['run']}" if options.what_if_results else "")
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
    incomplete = None
    if missing:
        run = summary["run"]
        incomplete = (f"incomplete: {len(missing)} term(s) not priced by run {run}'s fits: "
                      + ", ".join(t["term"] + (f" ({t['fit']})" if t["warning"] == "fit rejected" else "")
                                  for t in missing))
        other = _run_that_prices(options, run) if not options.what_if and not options.what_if_results else None
        if other:
            incomplete += f"; run {other}'s fits price every term: --run {other}"
    return Predicted(tables, titled, tables.get("what_if_terms", terms), incomplete, said, picked)


def _run_that_prices(layout: PredictOptions, passed: str, most: int = 10) -> str | None:
    """The latest other sweep of the dataset (of its `most` latest runs) whose accepted fits price
    every term of the layout, or None."""
    for run_id in list(reversed(dataset.runs(layout.path)))[:most]:
        if run_id == passed or dataset.command_of(layout.path, run_id) in dataset.PROBE_COMMANDS:
            continue
        try:
            df = fit_rows(layout.path, run_id)
        except UsageError:
            continue
        if len(df) and all(t["time_ms"] is not None for t in pricing.predict(_layout(layout), pricing.fit_table(df))):
            return run_id
    return None


def _layout(layout: PredictOptions) -> pricing.Layout:
    return pricing.Layout(
        params=layout.params, dp=layout.dp, tp=layout.tp, pp=layout.pp, fsdp=layout.fsdp,
        dtype_bytes=ELEMENT_BYTES[layout.dtype], bucket_mb=layout.bucket_bytes / 1e6,  # Layout counts MB of 1e6 bytes
        layers=layout.layers, hidden=layout.hidden, seq=layout.seq, micro_batch=layout.micro_batch,
        micro_batches=layout.micro_batches, gpus_per_node=layout.ranks_per_node,
    )


def _priced(layout: PredictOptions, fits: dict, rejected: dict, run_id: str) -> tuple[dict, list[dict]]:
    """The layout priced from `fits` (`rejected`: the fits not accepted, and why): the summary and
    one row per term."""
    terms = pricing.predict(_layout(layout), fits, rejected)
    if not terms:
        raise UsageError("nothing to predict: set --dp, --tp or --pp above 1")
    missing = [t for t in terms if t["time_ms"] is None]
    total = sum(t["time_ms"] for t in terms if t["time_ms"] is not None)
    world = layout.dp * layout.tp * layout.pp
    return {"run": run_id, "world_size": world, "nodes": -(-world // layout.ranks_per_node),
            "comm_ms_per_step": None if missing else total, "measured_terms_ms": total,
            "complete": not missing,
            "note": ("incomplete: not priced: " + "; ".join(f"{t['term']} ({t['measure_with']})" for t in missing))
            if missing else "upper bound: assumes no overlap with compute (T_step = T_comp + T_comm - T_overlap)"
            }, terms


def bucket_bytes(text: str) -> int:
    """--bucket SIZE: a binary size (25M = 25 MiB)."""
    try:
        return parse_bytes(text)
    except ValueError:
        raise UsageError(f"--bucket {text[:40]!r}: expected a size such as 25M (binary: 25 MiB)") from None
