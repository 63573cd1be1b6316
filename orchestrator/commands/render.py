"""The one formatter of reports: titled tables as aligned text, markdown, csv or json."""

from __future__ import annotations

import csv
import io
import json


def _cell(value) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"
    return str(value)


def render_tables(tables: list[tuple[str, list[dict]]], fmt: str) -> str:
    if fmt == "json":
        return json.dumps({title: rows for title, rows in tables}, indent=1, default=str)
    parts = []
    for title, rows in tables:
        columns = list(dict.fromkeys(k for r in rows for k in r))
        if fmt == "csv":
            buf = io.StringIO()
            buf.write(f"# {title}\n")
            writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
            if rows:
                writer.writeheader()
                writer.writerows(rows)
            parts.append(buf.getvalue())
            continue
        cells = [[_cell(r.get(c)) for c in columns] for r in rows]
        if fmt == "markdown":
            lines = [f"### {title}", ""]
            if rows:
                lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
                lines += ["| " + " | ".join(row) + " |" for row in cells]
            else:
                lines.append("(none)")
            parts.append("\n".join(lines) + "\n")
            continue
        widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
        lines = [f"== {title}"]
        if rows:
            lines.append("  ".join(c.rjust(w) for c, w in zip(columns, widths)))
            lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in cells]
        else:
            lines.append("(none)")
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)
