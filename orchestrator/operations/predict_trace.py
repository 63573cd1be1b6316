"""`collbench predict --trace`: a real job's Flight Recorder ops priced from a sweep's fits, beside a
replay of the same dumps and the job's own times (operations.predict prices a layout; this its trace)."""

from __future__ import annotations

from orchestrator.analysis import predict as pricing
from orchestrator.errors import UsageError
from orchestrator.operations.predict_fits import Predicted, fit_rows
from orchestrator.results import dataset


def predict_trace(options) -> Predicted:
    """`options` (operations.predict.PredictOptions with `trace`): a traced job's steps priced from a
    run's fits, beside a replay of them and the job's own times."""
    from orchestrator.analysis import replay
    from orchestrator.sweep import trace

    loaded = trace.load(list(options.trace))
    program, notes = trace.program(loaded, trace.find_steps(loaded.ops[0], options.ops_per_step), gaps=False)
    picked: list[str] = []
    df = fit_rows(options.path, options.run, picked)
    steps, terms = pricing.trace_steps(program, pricing.fit_table(df), options.ranks_per_node)
    missing = [t for t in terms if t["time_ms"] is None]
    predicted = sorted(s["comm_ms"] for s in steps)[len(steps) // 2] if steps and not missing else None
    summary = {"run": df.run_id.iloc[0] if len(df) else None, "world_size": loaded.world_size,
               "steps": program.steps, "predicted_ms_per_step": predicted, "complete": not missing}
    if options.replay_run:
        rows = dataset.load(options.path, options.replay_run)
        measured = replay.step_times(rows[rows.pattern == replay.PATTERN])
        if not measured:
            raise UsageError(f"--replay-run {options.replay_run}: no replayed step in it")
        comm = sorted(v["comm_us"] for v in measured.values())
        summary["replayed_ms_per_step"] = comm[len(comm) // 2] / 1e3
        summary["predicted/replayed"] = predicted / summary["replayed_ms_per_step"] if predicted else None
    traced = [op.duration_us for ops in loaded.ops.values() for op in ops if op.duration_us is not None]
    if traced:
        summary["traced_ms_per_step"] = sum(op.traced_us or 0 for op in program.ops[0]) / max(program.steps, 1) / 1e3
    summary["note"] = "; ".join(notes) or "-"
    incomplete = (f"incomplete: {len(missing)} traced op shape(s) without an accepted fit: "
                  + ", ".join(t["term"] for t in missing)) if missing else None
    return Predicted({"summary": [summary], "terms": terms},
                     [("per-step communication of the traced job (median step)", [summary]),
                      ("terms (per step)", terms)], terms, incomplete, picked=picked)
