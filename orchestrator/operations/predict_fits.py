"""What both of predict's pricings share (operations.predict: a layout; operations.predict_trace: a
traced job): the rows a run's fits are made from, and what a prediction returns."""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.errors import UsageError
from orchestrator.results import dataset


@dataclass
class Predicted:
    """The priced tables (summary and terms; the what-if's beside them), their titles for a table,
    the one table CSV prints, the line an incomplete prediction says, and old what-if keys used."""

    tables: dict[str, list[dict]]
    titled: list[tuple[str, list[dict]]]
    csv: list[dict]
    incomplete: str | None = None
    renamed: list[tuple[str, str]] = field(default_factory=list)
    picked: list[str] = field(default_factory=list)  # which run was taken where none was named, in words

    @property
    def exit_code(self) -> int:
        return 1 if self.incomplete else 0


def fit_rows(path: str, run: str | None, picked: list[str] | None = None):
    """The rows a run's fits are made from: a sweep's (a replay's ops are not fitted); without `run`
    the latest sweep (dataset.latest_sweep), said in `picked` where the dataset holds more than one."""
    if run is None:
        pick = dataset.latest_sweep(path)
        run, note = pick.run_id, pick.note(path)
        if note and picked is not None:
            picked.append(note)
    df = dataset.load(path, run, columns=["run_id", "status", "collective", "topology", "world_size", "msg_bytes",
                                          "time_us", "time_us_p50", "time_us_p99", "time_us_min", "pattern"])
    if (df.pattern == "replay").all():
        raise UsageError(f"{path}: run {run or '(the latest)'} holds no sweep, only replayed ops: give "
                         "--run RUN_ID of a `collbench run` sweep to take the fits from")
    return df
