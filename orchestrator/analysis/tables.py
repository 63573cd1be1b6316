"""The report's tables of a run by size (busbw and latency per topology, peaks, dtypes at equal
element counts): what was measured, read off the ok rows; the flags are diagnosis.py's."""

from __future__ import annotations

import math

import pandas as pd

from orchestrator.analysis.diagnosis import DOMAIN, TOPOLOGIES, topologies
from orchestrator.analysis.scores import ok_rows, where
from orchestrator.sweep.sizes import format_bytes


def by_size(df: pd.DataFrame, collective: str, value: str) -> list[dict]:
    """`value` (busbw_gbps or time_us) by msg_bytes per topology, the widest group of each; busbw of
    groups of two ranks or more (a one-rank group crosses no link: its busbw is a copy inside one
    device, 4 TB/s on an H200, and would stand as `intra`; its times stay in the latency table)."""
    d = ok_rows(df)
    d = where(d, (d.collective == collective) & ((d.world_size > 1) if value == "busbw_gbps" else True))
    d = where(d, d.world_size == d.groupby("topology", observed=True).world_size.transform("max"))
    table = d.groupby(["msg_bytes", "topology"], observed=True)[value].median().unstack("topology")
    rows = []
    for size, rec in table.iterrows():
        row = {"collective": collective, "msg_bytes": int(size), "size": format_bytes(int(size))}
        for t in topologies(d):
            v = rec.get(t)
            row[t] = float(v) if v is not None and v == v else None
        rows.append(row)
    return rows


def peaks(df: pd.DataFrame, collective: str, busbw: list[dict]) -> list[dict]:
    """Per topology (widest group): the peak busbw and the smallest size reaching half of it, from
    `by_size(df, collective, "busbw_gbps")`."""
    out = []
    series = {}
    for row in busbw:
        for t in (*TOPOLOGIES, DOMAIN):
            if row.get(t) is not None:
                series.setdefault(t, []).append((row["msg_bytes"], row[t]))
    d = ok_rows(df)
    d = where(d, d.collective == collective)
    for t, points in series.items():
        peak = max(v for _, v in points)
        half = min(s for s, v in points if v >= peak / 2)
        out.append({"collective": collective, "topology": t, "world_size": int(d[d.topology == t].world_size.max()),
                    "peak_busbw": peak, "half_peak_bytes": half, "half_peak_size": format_bytes(half)})
    return out


def precision(df: pd.DataFrame, collective: str) -> list[dict]:
    """Time and busbw across dtypes at equal element counts (the widest group measured), so the
    effect of fewer bytes per element is read off, measured rather than assumed."""
    d = ok_rows(df)
    d = where(d, d.collective == collective)
    if d.dtype.nunique() < 2:
        return []
    d = d[d.world_size == d.world_size.max()]
    agg = d.groupby(["count", "dtype"], observed=True).agg(
        msg_bytes=("msg_bytes", "first"), time_us=("time_us", "median"), busbw=("busbw_gbps", "median")).reset_index()
    shared = agg.groupby("count", observed=True).dtype.transform("nunique") >= 2
    agg = agg[shared].sort_values(["count", "msg_bytes"])
    return [{"collective": collective, "count": int(r["count"]), "dtype": r["dtype"], "msg_bytes": int(r.msg_bytes),
             "time_us": float(r.time_us), "busbw": float(r.busbw)} for _, r in agg.iterrows()]


def plain(value: float, digits: int = 4) -> str:
    """A number in plain decimals to `digits` significant digits (0.0000973, 12.35, 48213), never
    in exponent form; '-' for NaN."""
    if value != value:
        return "-"
    if value == 0 or math.isinf(value):
        return str(value) if math.isinf(value) else "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    shown = f"{value:.{decimals}f}"
    return shown.rstrip("0").rstrip(".") if "." in shown else shown
