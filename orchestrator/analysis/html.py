"""A run's report as one self-contained HTML file a person can send (report --format html): the
verdicts and flags with their reasons first, intra- versus inter-node, measured against expected
with the sources, the plots inline (SVG: no network, no script, no font to fetch), the other
tables, and the run's header last. Pure given the report and its rows."""

from __future__ import annotations

import datetime as dt
from html import escape

from orchestrator.analysis import plots
from orchestrator.analysis.frame import Frame
from orchestrator.analysis.report import COLUMNS, TABLES, Report, title
from orchestrator.analysis.tables import plain

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1100px;
color:#1d2127;padding:0 1em}
h1{font-size:1.5em;margin-bottom:.2em} h2{font-size:1.2em;margin-top:1.8em;border-bottom:1px solid #d0d4da}
.meta{color:#555} table{border-collapse:collapse;margin:.6em 0;font-size:13px} caption{text-align:left;
font-weight:600;padding:.3em 0} th,td{border:1px solid #d0d4da;padding:.25em .55em;text-align:left;
vertical-align:top} th{background:#f2f4f7} td.num{text-align:right;font-variant-numeric:tabular-nums}
.verdict{font-size:1.1em;padding:.6em .9em;border-radius:6px;margin:.8em 0}
.ok{background:#e6f4ea;border:1px solid #8cc79a} .bad{background:#fdecea;border:1px solid #e3a19a}
.warn{background:#fff6e0;border:1px solid #e7c36a} ul.reasons{margin:.2em 0;padding-left:1.2em}
ul.reasons li span{color:#555} figure{margin:1.2em 0} figure svg{max-width:100%;height:auto}
figcaption{color:#555;font-size:12px}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(480px,1fr));gap:0 1.2em}
.plots figure.wide{grid-column:1/-1} details summary{cursor:pointer;color:#335;margin:.4em 0}
"""
WIDE = ' class="wide"'
FOLD_ROWS = 12  # a longer table is folded (<details>): the plots above show it, its numbers are a click away
_FIRST = ("intra_vs_inter", "expected")


def render(rep: Report, frame: Frame, scale: float) -> str:
    run = rep.run
    parts = [f"<h1>collbench report: run {_e(run.get('run_id'))}</h1>", _meta(run)]
    parts += [f'<div class="verdict warn">WARNING: {_e(w)}</div>' for w in rep.warnings]
    parts.append(_verdicts(rep))
    empty = [name for name in TABLES if not rep.tables[name]]  # sections this run has nothing for: left out
    for name in _FIRST:
        if name not in empty:
            parts.append(f"<h2>{_e(title(name, rep.unit))}</h2>" + _table(name, rep.tables[name]))
    figures = [f"<figure{WIDE if fig.get_figwidth() > plots.HALF_WIDTH_INCHES else ''}>{plots.svg(fig)}"
               f"<figcaption>{_e(caption)}</figcaption></figure>"
               for name, caption, fig in plots.figures(frame, scale, rep.unit)]
    parts.append("<h2>Plots</h2>" + (f'<div class="plots">{"".join(figures)}</div>' if figures
                                     else "<p>(no plot: nothing measured ok)</p>"))
    for name in TABLES:
        if name not in _FIRST and name not in empty:
            parts.append(f"<h2>{_e(title(name, rep.unit))}</h2>" + _table(name, rep.tables[name]))
    if empty:
        parts.append(f'<p class="meta">Nothing in this run for: {_e(", ".join(empty))} (sections left out).</p>')
    parts.append("<h2>The run</h2>" + _kv(run))
    generated = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>collbench report {_e(run.get('run_id'))}</title><style>{_STYLE}</style></head><body>"
            + "\n".join(parts) + f'<p class="meta">collbench report, generated {generated}.</p></body></html>\n')


def _e(value) -> str:
    return escape("" if value is None else str(value))


def _meta(run: dict) -> str:
    bits = [f"state {_e(run.get('state') or 'unknown')}", f"started {_e(run.get('started_at') or '?')}"]
    if run.get("collbench_version"):
        bits += [f"collbench {_e(run['collbench_version'])}", f"torch {_e(run.get('torch_version'))}",
                 f"ray {_e(run.get('ray_version'))}", f"backend {_e(run.get('backend'))}",
                 f"NCCL {_e(', '.join(run.get('nccl_versions') or []) or '-')}"]
    hosts = ", ".join(run.get("hostnames") or [])
    devices = ", ".join(run.get("gpu_models") or run.get("device_models") or [])
    return f'<p class="meta">{" · ".join(bits)}<br>hosts: {_e(hosts) or "?"}; devices: {_e(devices) or "?"}</p>'


def _verdicts(rep: Report) -> str:
    flags = [f.to_json() for f in rep.flags]
    if not flags:
        return '<h2>Verdicts and flags</h2><div class="verdict ok">Nothing flagged: every group is in line with ' \
               "the fastest of its peers and, where an expected value applies, with it.</div>" + "".join(
                   f'<p class="meta">{_e(w)}</p>' for w in rep.warnings if w.startswith("all "))
    head = f'<div class="verdict bad">{len(flags)} flag(s): ' + _e(", ".join(sorted({f["kind"] for f in flags}))) + \
        "</div>"
    rows = "".join(
        f"<tr><td>{_e(f['kind'])}</td><td>{_e(', '.join(f['nodes']))}</td><td>{_e(f['message'])}</td>"
        f"<td>{_reasons(f.get('reasons') or [])}</td></tr>" for f in flags)
    return ("<h2>Verdicts and flags</h2>" + head + "<table><tr><th>kind</th><th>nodes</th><th>what</th>"
            f"<th>why (reasons)</th></tr>{rows}</table>")


def _reasons(reasons: list[dict]) -> str:
    if not reasons:
        return ""
    return "<ul class=\"reasons\">" + "".join(
        f"<li>{_e(r['message'])}<br><span>{_e(r['evidence'])}</span></li>" for r in reasons) + "</ul>"


def _table(name: str, rows: list[dict]) -> str:
    """The rows as a table, less the columns no row has a value in (a one-node run's inter column);
    folded where longer than FOLD_ROWS."""
    columns = [c for c in dict.fromkeys([*COLUMNS[name], *(k for r in rows for k in r)])
               if any(_shown(r.get(c)) for r in rows)]
    if not rows:
        return "<p>(none)</p>"
    # a long text every row shares (the expected value's source) is said once, above the table
    shared = [c for c in columns if len(rows) > 1 and isinstance(rows[0].get(c), str) and len(rows[0][c]) > 40
              and all(r.get(c) == rows[0][c] for r in rows)]
    columns = [c for c in columns if c not in shared]
    said = "".join(f'<p class="meta">{_e(c)} (every row): {_e(rows[0][c])}</p>' for c in shared)
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(_cell(r.get(c), c) for c in columns) + "</tr>" for r in rows)
    table = f"{said}<table><tr>{head}</tr>{body}</table>"
    return table if len(rows) <= FOLD_ROWS else f"<details><summary>{len(rows)} rows: show</summary>{table}</details>"


def _shown(value) -> bool:
    """Whether a cell has something to show (None, '' and an empty list have not)."""
    return value is not None and not (isinstance(value, str) and value == "") and not (
        hasattr(value, "__len__") and not isinstance(value, str) and len(value) == 0)


def _cell(value, column: str) -> str:
    if column == "reasons":
        return f"<td>{_reasons(value or [])}</td>"
    if isinstance(value, float):
        shown = plain(value)
        return f'<td class="num">{shown}</td>'
    if isinstance(value, int) and not isinstance(value, bool):
        return f'<td class="num">{value}</td>'
    if isinstance(value, (list, tuple)):
        return f"<td>{_e(', '.join(map(str, value)))}</td>"
    return f"<td>{_e('-' if value is None else value)}</td>"


def _kv(run: dict) -> str:
    return "<table>" + "".join(f"<tr><th>{_e(k)}</th><td>{_e(', '.join(v) if isinstance(v, list) else v)}</td></tr>"
                               for k, v in run.items() if v not in (None, [], "")) + "</table>"
