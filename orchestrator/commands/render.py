"""The one formatter of reports: titled tables as aligned text or markdown, one table as CSV."""

from __future__ import annotations

import csv
import io


def _cell(value, sep: str = ", ") -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"
    if isinstance(value, (list, tuple)):
        return sep.join(_cell(v, sep) for v in value)
    if isinstance(value, dict) and "kind" in value and "message" in value:  # a reason (analysis.explain)
        return f"{value['kind']}: {value['message']}"
    return str(value)


def render_tables(tables: list[tuple[str, list[dict]]], fmt: str) -> str:
    """`table` (aligned text) or `markdown`; an empty table prints "(none)"."""
    parts = []
    for title, rows in tables:
        columns = list(dict.fromkeys(k for r in rows for k in r))
        cells = [[_cell(r.get(c)) for c in columns] for r in rows]
        if fmt == "markdown":
            lines = [f"### {title}", ""]
            if rows:
                lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
                lines += ["| " + " | ".join(row) + " |" for row in cells]
            else:
                lines.append("(none)")
        else:
            widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
            lines = [f"== {title}"]
            if rows:
                lines.append("  ".join(c.rjust(w) for c, w in zip(columns, widths)))
                lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in cells]
            else:
                lines.append("(none)")
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def render_csv(rows: list[dict], columns: tuple[str, ...] = ()) -> str:
    """One table as CSV with a header row (lists joined by ';'), for read_csv; an empty table is
    its header alone (`columns`), which read_csv reads as no rows."""
    columns = list(dict.fromkeys(k for r in rows for k in r)) or list(columns)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for r in rows:
        writer.writerow(["" if r.get(c) is None else _cell(r.get(c), ";") if isinstance(r.get(c), (list, tuple))
                         else r.get(c) for c in columns])
    return buf.getvalue()
