"""Rows that time torch's dispatch, not the fabric (issue 56): a call within DISPATCH_BOUND of c10d's
own cost of one, the dispatch floor. The floor is each row's `dispatch_floor_us` (measured by
every worker as it starts: workloads.clocks), or, for rows written before it was measured, the
run's own one-rank in-place all_reduces, which move nothing (NCCL launches no kernel for them): on
the recorded H200 40-48 us a call, so every all_gather up to 4M there (42-43 us) timed torch.
Pure."""

from __future__ import annotations

import pandas as pd

from orchestrator.analysis.scores import ok_rows
from orchestrator.judging.defaults import DISPATCH_BOUND
from orchestrator.sweep.sizes import format_bytes


def floor_from_rows(df: pd.DataFrame) -> float | None:
    """The median time of the rows' one-rank in-place all_reduces, where they have any."""
    d = ok_rows(df)
    alone = d[(d.world_size == 1) & (d.collective == "all_reduce") & d.in_place.astype(bool)]
    return float(alone.time_us.median()) if len(alone) else None


def bound(df: pd.DataFrame) -> pd.Series:
    """Each ok row: True where its time is within DISPATCH_BOUND of its floor, False where above,
    NA where no floor is known (neither the row's nor the run's one-rank all_reduces)."""
    d = ok_rows(df)
    floor = d.dispatch_floor_us if "dispatch_floor_us" in d else pd.Series(float("nan"), index=d.index)
    fallback = floor_from_rows(d)
    floor = floor.fillna(fallback) if fallback is not None else floor
    below = d.time_us < DISPATCH_BOUND * floor
    return below.astype("boolean").mask(floor.isna())


def warning(df: pd.DataFrame) -> str | None:
    """The report's line where some rows time the dispatch, with how many and up to which size."""
    d = ok_rows(df)
    hits = bound(d).fillna(False).astype(bool)
    if not hits.any():
        return None
    top = int(d.msg_bytes[hits].max())
    known = "dispatch_floor_us" in d and d.dispatch_floor_us.notna().any()
    floor = float(d.dispatch_floor_us.median()) if known else floor_from_rows(d)
    return (f"{int(hits.sum())} of {len(d)} rows (up to {format_bytes(top)}) take less than {DISPATCH_BOUND:g}x the "
            f"dispatch floor ({floor:.1f} us a call: torch's own cost of a collective that moves nothing"
            + ("" if known else ", from this run's one-rank in-place all_reduces") + "): they time the dispatch, "
            "not the fabric: read their time_us_batch, or measure with --cuda-graph (nccl-tests' -G; "
            "docs/concepts/bandwidth.md)")
