"""The one formatter of reports: titled tables as aligned text or markdown, one table as CSV."""

from __future__ import annotations

import csv
import io
import math


def number(value: float) -> str:
    """Four significant digits without e-notation (busbw of 16 bytes is 0.000007184 GB/s, not
    7.184e-06), whole numbers from 10,000; trailing zeros dropped. Below 1e-12: e-notation."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    if abs(value) >= 1e4:
        return f"{value:.0f}"
    digits = 3 - math.floor(math.log10(abs(value)))
    if digits > 12:
        return f"{value:.4g}"
    text = f"{value:.{max(digits, 0)}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _cell(value, sep: str = ", ") -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, float):
        return number(value)
    if isinstance(value, (list, tuple)):
        return sep.join(_cell(v, sep) for v in value)
    if isinstance(value, dict) and "kind" in value and "message" in value:  # a reason (analysis.explain)
        return f"{value['kind']}: {value['message']}"
    return str(value)


# verdict words by colour, in the columns that hold a verdict (on a terminal only: colour_enabled)
_PAINTED = ("status", "verdict", "result")
_COLOURS = {"31": {"fail", "failed", "slow", "hang", "lost", "dropped", "timeout", "error", "regressed", "below"},
            "33": {"warn", "intermittent", "inconclusive", "skip", "skipped", "unsettled", "suspect"},
            "32": {"ok", "pass", "unchanged", "finished"}}


def colour_enabled(stream) -> bool:
    """Colour for a terminal only: a TTY, TERM not `dumb`, and NO_COLOR unset or empty (no-color.org)."""
    import os

    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        return False
    return tty and not os.environ.get("NO_COLOR") and os.environ.get("TERM", "") != "dumb"


def _paint(text: str, padded: str) -> str:
    code = next((c for c, words in _COLOURS.items() if text.strip().lower() in words), None)
    return f"\033[{code}m{padded}\033[0m" if code else padded


def terminal_width(stream) -> int | None:
    """The terminal's columns where `stream` is one (tables wider than it print a record per row);
    None for a file or a pipe, which take every table at its full width."""
    import os

    try:
        return os.get_terminal_size(stream.fileno()).columns if stream.isatty() else None
    except (AttributeError, ValueError, OSError):
        return None


def on_screen(stream) -> dict:
    """render_tables' `colour` and `width` for output to `stream`: a terminal's, or none."""
    return {"colour": colour_enabled(stream), "width": terminal_width(stream)}


def render_tables(tables: list[tuple[str, list[dict]]], fmt: str, colour: bool = False,
                  width: int | None = None) -> str:
    """`table` (aligned text) or `markdown`; an empty table prints "(none)". `colour`: verdict words
    (ok, warn, fail, slow, ...) in the status and verdict columns coloured, for a terminal. `width`:
    a table wider than this many columns prints each row as a record, a line per column (as psql's
    expanded display), so that nothing wraps into the next row on a terminal."""
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
            if rows and width is not None and sum(widths) + 2 * (len(widths) - 1) > width:
                name_w = max(len(c) for c in columns)
                for i, row in enumerate(cells, 1):
                    lines.append(f"-- {i} of {len(cells)}")
                    lines += [f"{c.ljust(name_w)}  {_paint(v, v) if colour and c in _PAINTED else v}"
                              for c, v in zip(columns, row)]
            elif rows:
                lines.append("  ".join(c.rjust(w) for c, w in zip(columns, widths)))
                painted = [colour and c in _PAINTED for c in columns]
                lines += ["  ".join(_paint(v, v.rjust(w)) if p else v.rjust(w) for v, w, p in zip(row, widths, painted))
                          for row in cells]
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


# nccl-tests' own layout (src/util.cu, 2.19): a block per test, out-of-place and in-place side by side
_NCCL_HEAD = "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s "
_PER_RANK_COUNT = ("all_gather", "reduce_scatter", "all_to_all")  # nccl-tests prints these' count per rank
_ROOTED = ("broadcast", "reduce")


def _nccl_float(value: float | None, width: int) -> str:
    """nccl-tests' getFloatStr: two decimals, else one, else none, else an exponent, in `width`."""
    if value is None or value != value:
        return "nan".rjust(width)
    for fmt in (f"%{width}.2f", f"%{width}.1f", f"%{width}.0f"):
        text = fmt % value
        if len(text) <= width:
            return text
    return (f"%{width}.1e" if width >= 7 else f"%{width}.0e") % value


def _nccl_placement(m: dict | None) -> str:
    if m is None:
        return " " * 32  # nccl-tests' blank body of a placement not measured
    wrong = m.get("n_wrong")
    wrong = "   N/A" if wrong is None or wrong != wrong else "%6g" % wrong
    return "  %7s  %6s  %6s  %s" % (_nccl_float(m.get("time_us"), 7), _nccl_float(m.get("algbw_gbps"), 6),
                                    _nccl_float(m.get("busbw_gbps"), 6), wrong)


def render_nccl_tests(blocks: list[dict]) -> str:
    """Blocks of rows in nccl-tests' table layout, for reading beside its output. A block: `title`
    (a comment line), `collective`, `dtype` (nccl-tests' type name), `op`, `world_size`, and `rows`:
    {msg_bytes: {False: figures, True: figures}}, figures being time_us, algbw_gbps, busbw_gbps, n_wrong."""
    lines = []
    for b in blocks:
        lines += [f"# Collective test starting: {b['binary']}", f"# {b['title']}", "#",
                  "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
                  % ("", "", "", "", ""),
                  _NCCL_HEAD % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
                                "algbw", "busbw", "#wrong"),
                  _NCCL_HEAD % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                                "(GB/s)", "")]
        busbw = []
        for msg_bytes, placed in b["rows"].items():
            count = placed["count"] // b["world_size"] if b["collective"] in _PER_RANK_COUNT else placed["count"]
            root = 0 if b["collective"] in _ROOTED else -1
            line = "%12li  %12li  %8s  %6s  %6s" % (msg_bytes, count, b["dtype"], b["op"], "%6i" % root)
            lines.append(line + _nccl_placement(placed.get(False)) + _nccl_placement(placed.get(True)))
            busbw += [m["busbw_gbps"] for m in (placed.get(False), placed.get(True))
                      if m is not None and m.get("busbw_gbps") is not None]
        avg = sum(busbw) / len(busbw) if busbw else 0.0
        lines += ["# %-20s : %g " % ("Avg bus bandwidth", avg), "#", ""]
    return "\n".join(lines)


def render_junit(suite: str, cases: list[dict]) -> str:
    """JUnit XML, as CI systems read it: one test case per dict (`classname`, `name`, `status` ok,
    warn, skip or fail, `message`, `text`); fail is a <failure>, skip <skipped>, warn a pass that says
    itself in <system-out> (JUnit has no warning)."""
    from xml.etree import ElementTree as ET

    failed = sum(c["status"] == "fail" for c in cases)
    skipped = sum(c["status"] == "skip" for c in cases)
    root = ET.Element("testsuites")
    node = ET.SubElement(root, "testsuite", name=suite, tests=str(len(cases)), failures=str(failed), errors="0",
                         skipped=str(skipped))
    for c in cases:
        case = ET.SubElement(node, "testcase", classname=c["classname"], name=c["name"])
        if c["status"] == "fail":
            ET.SubElement(case, "failure", message=c["message"], type="fail").text = c.get("text") or c["message"]
        elif c["status"] == "skip":
            ET.SubElement(case, "skipped", message=c["message"])
        else:
            ET.SubElement(case, "system-out").text = f"{c['status']}: {c['message']}" + (
                f" ({c['text']})" if c.get("text") else "")
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode")
