"""The one formatter for what a run prints: group headers, result rows, progress, summary."""

from __future__ import annotations

import sys
import time

from orchestrator.sweep.sizes import format_bytes

_COLUMNS = (
    ("collective", 14, "s"),
    ("dtype", 11, "s"),
    ("op", 4, "s"),
    ("place", 5, "s"),
    ("msg_bytes", 9, "s"),
    ("count", 11, "d"),
    ("time_us", 11, ".1f"),
    ("algbw", 8, ".3f"),
    ("busbw", 8, ".3f"),
    ("#wrong", 7, "d"),
)


def header() -> str:
    return "  " + " ".join(f"{name:>{w}}" if f != "s" else f"{name:<{w}}" for name, w, f in _COLUMNS)


def row_line(row: dict) -> str:
    if row["status"] != "ok":
        return (
            f"  {row['collective']:<14} {row['dtype']:<11} {row['op']:<4} {_place(row):<5} "
            f"{format_bytes(row['msg_bytes']):<9} {row['status'].upper()}: {row.get('error') or ''}"
        )
    values = (
        row["collective"],
        row["dtype"],
        row["op"],
        _place(row),
        format_bytes(row["msg_bytes"]),
        row["count"],
        row["time_us"],
        row["algbw_gbps"],
        row["busbw_gbps"],
        row["n_wrong"],
    )
    line = "  " + " ".join(f"{v:<{w}{f}}" if f == "s" else f"{v:>{w}{f}}" for v, (_, w, f) in zip(values, _COLUMNS))
    if row.get("t_step_us") is not None:
        line += (
            f"  comp {row['t_comp_us']:.1f} step {row['t_step_us']:.1f} overlap {row['t_overlap_us']:.1f} us "
            f"({row['overlap_efficiency']:.0%})"
        )
    return line


def _place(row: dict) -> str:
    return "in" if row["in_place"] else "out"


def group_line(group, base: dict) -> str:
    nodes = ", ".join(dict.fromkeys(f"{h} {ip}" for h, ip in zip(base["hosts"], base["node_ips"])))
    return (
        f"# group {group.group_id} ({group.pattern}, {base['topology']}): {base['world_size']} ranks on "
        f"{base['n_nodes']} node(s) [{nodes}], round {group.round}, {base['groups_in_round']} group(s) in round"
    )


class Progress:
    """Groups done, elapsed time and an estimate of what remains, on stderr."""

    def __init__(self, total: int, out=sys.stderr) -> None:
        self.total = total
        self.done = 0
        self.t0 = time.monotonic()
        self.out = out

    def group_done(self, n: int = 1) -> None:
        self.done += n
        elapsed = time.monotonic() - self.t0
        left = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        print(
            f"[progress] {self.done}/{self.total} groups done, {elapsed:.0f}s elapsed, ~{left:.0f}s left",
            file=self.out,
            flush=True,
        )


def failure_summary(failures: list[dict]) -> list[str]:
    """One line per distinct error: `[ranks 0,1,3 on node-b] timeout: ... (groups r0-g1, r2-g0)`."""
    by_error: dict[tuple[str, str], list[dict]] = {}
    for f in failures:
        by_error.setdefault((f["status"], f["error"]), []).append(f)
    lines = []
    for (status, error), items in by_error.items():
        ranks = sorted({r for f in items for r in f["ranks"]})
        hosts = sorted({h for f in items for h in f["hosts"]})
        groups = ", ".join(f["group_id"] for f in items)
        lines.append(
            f"[ranks {','.join(map(str, ranks))} on {', '.join(hosts)}] {status}: {error} (groups {groups})"
        )
    return lines


def _cell(value) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"
    return str(value)


def render_tables(tables: list[tuple[str, list[dict]]], fmt: str) -> str:
    """Titled tables as aligned text, markdown, csv or json: the one formatter of reports."""
    import csv
    import io
    import json

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
