"""Plots of a run: busbw and latency versus message size, one figure each with a panel per
collective sharing axes (per topology the median, the iterations' range and the fit, each point's
value on hover), a node-by-node heatmap of pairwise busbw at a fixed figure size
whatever the node count, and where measured the busbw of every GPU pair inside the nodes and of
every rail across them. `figures` builds them; `write` saves them as PNG files (report --plots),
`svg` renders one inline (report --format html)."""

from __future__ import annotations

import html
import io
import os
import re
from collections.abc import Iterator

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.fonttype"] = "path"  # glyphs as paths: an inline SVG needs no font
matplotlib.rcParams["svg.hashsalt"] = "collbench"  # the same run draws the same SVG
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from orchestrator.analysis import diagnosis, scores, tables  # noqa: E402
from orchestrator.analysis.fits import MIN_TOLERANCE, fit_groups, off_by  # noqa: E402
from orchestrator.analysis.frame import Frame  # noqa: E402
from orchestrator.sweep.sizes import format_bytes  # noqa: E402

HEATMAP_INCHES = 10  # the heatmap's size: more nodes make smaller cells, not a bigger figure
LABELLED_NODES = 64  # above this many nodes the axes carry no node names
PANELS_A_ROW = 4
HALF_WIDTH_INCHES = 7.5  # a wider figure (small multiples of 3 or 4 collectives) takes a page's whole width


def figures(frame: Frame, scale: float, unit: str) -> Iterator[tuple[str, str, object]]:
    """(file name, caption, matplotlib figure) of every plot the run's rows allow."""
    df, run_id = frame.df, frame.df.run_id.iloc[0]
    # a line needs two sizes: a run of one size (a pairwise probe at 8M) has its heatmap instead; a
    # run of one-rank groups has times and no busbw (tables.by_size)
    fits = None
    for value, name in (("busbw_gbps", "busbw"), ("time_us", "latency")):
        collectives = [c for c in dict.fromkeys(df.collective.dropna()) if len(tables.by_size(df, c, value)) > 1]
        if collectives:
            fits = fits if fits is not None else {(c, t, n): fit for c, t, n, _, fit in fit_groups(df) if not fit.poor}
            fig = _by_size(df, collectives, value, fits, scale, unit)
            drawn = [ax for ax in fig.axes if ax.get_visible()]
            shown = ["each topology's widest group's median"] + (
                ["its iterations' range shaded"] if any(ax.collections for ax in drawn) else []) + (
                [f"the accepted fit dashed within {MIN_TOLERANCE:.0%} of it"]
                if any(ln.get_linestyle() == "--" for ax in drawn for ln in ax.lines)
                else [])
            yield (f"{name}.png", f"{name} by message size, {len(collectives)} collective(s), run {run_id}: "
                   + ", ".join(shown), fig)
    for made in (_heatmap(frame, scale, unit), _gpu_pairs(frame, scale, unit), _rails(frame, scale, unit)):
        if made is not None:
            yield made


def _by_size(df, collectives: list[str], value: str, fits: dict, scale: float, unit: str):
    """Small multiples, one panel per collective sharing both axes: per topology the median line,
    the band from the fastest to the slowest iteration, and the accepted fit between the sizes
    where it is within MIN_TOLERANCE of the median drawn, either way (a fit is made to each size's
    median iteration, the points are rows' means: on a noisy host they part); every point carries
    its value as a tooltip (an SVG <title>: no script)."""
    cols = min(PANELS_A_ROW, len(collectives))
    rows = -(-len(collectives) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(max(3.4 * cols, 6.4) + 0.6, max(2.6 * rows, 3.6) + 0.3), sharex=True, sharey=True,
                             squeeze=False)
    busbw = value == "busbw_gbps"
    tips: dict[str, list[str]] = {}
    ok = scores.ok_rows(df)
    ok = ok[ok.world_size > 1] if busbw else ok  # as tables.by_size: a one-rank group's busbw is no link's
    for ax, coll in zip(axes.flat, collectives):
        d = ok[ok.collective == coll]
        d = d[d.world_size == d.groupby("topology", observed=True).world_size.transform("max")]
        for topo in diagnosis.topologies(d):
            g = d[d.topology == topo]
            if g.empty:
                continue
            spread = {"time_us_min", "time_us_max"} <= set(g) and g[["time_us_min", "time_us_max"]].notna().all(axis=None)
            if spread:  # each row's fastest and slowest iteration; busbw: the same bytes over those times
                g = g.assign(lo=g.time_us_min, hi=g.time_us_max) if not busbw else g.assign(
                    lo=g.busbw_gbps * g.time_us / g.time_us_max, hi=g.busbw_gbps * g.time_us / g.time_us_min)
            per = g.groupby("msg_bytes", observed=True).agg(
                mid=(value, "median"), factor=("busbw_gbps", "median"), alg=("algbw_gbps", "median"),
                **({"lo": ("lo", "median"), "hi": ("hi", "median")} if spread else {}))
            x = per.index.values.astype(float)
            y = per.mid.values * (scale if busbw else 1)
            n = int(g.world_size.max())
            line, = ax.plot(x, y, marker="o", markersize=4, label=f"{topo} ({n} ranks)")
            gid = f"pts-{len(tips)}"
            line.set_gid(gid)
            tips[gid] = [f"{coll} {topo} ({n} ranks), {format_bytes(int(s))}: "
                         + f"{tables.plain(v)} {unit if busbw else 'us'}" for s, v in zip(x, y)]
            if spread:
                scaled = scale if busbw else 1
                ax.fill_between(x, per.lo.values * scaled, per.hi.values * scaled, color=line.get_color(), alpha=0.18,
                                linewidth=0)
            fit = fits.get((coll, topo, n))
            if fit is not None:
                moved = per[per.alg > 0]  # busbw over algbw: the collective's factor (nccl-tests' PERFORMANCE.md)
                ratio = float(np.median(moved.factor / moved.alg)) if busbw and len(moved) else 1.0

                def fitted(sizes):
                    t = fit.alpha_us + sizes / (fit.bandwidth_gbps * 1e3)
                    return sizes / t / 1e3 * ratio * scale if busbw else t

                for lo, hi in _spans(off_by(fitted(x), y) <= MIN_TOLERANCE):
                    fx = np.geomspace(x[lo], x[hi], 60)
                    ax.plot(fx, fitted(fx), linestyle="--", linewidth=1, color=line.get_color())
        _size_axis(ax, sorted(set(d.msg_bytes.astype(int))))
        if not busbw:
            ax.set_yscale("log")
        ax.set_title(coll, fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes.flat[len(collectives):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("message size")
    for ax in axes[:, 0]:
        ax.set_ylabel(f"busbw ({unit})" if busbw else "time (us)")
    fig.tight_layout()
    fig.collbench_tips = tips
    return fig


def _spans(holds) -> list[tuple[int, int]]:
    """(first, last) index of each run of two or more consecutive True values."""
    out, start = [], None
    for i, ok in enumerate([*holds, False]):
        if ok and start is None:
            start = i
        elif not ok and start is not None:
            if i - 1 > start:
                out.append((start, i - 1))
            start = None
    return out


def _size_axis(ax, sizes: list[int]) -> None:
    """A log2 axis of message sizes labelled as the tables write them (16, 1K, 16M), at most ~10 ticks."""
    ax.set_xscale("log", base=2)
    ticks = sorted(set(sizes))
    step = max(1, -(-len(ticks) // 10))
    ax.set_xticks(ticks[::step], [format_bytes(t) for t in ticks[::step]])
    ax.minorticks_off()


def write(frame: Frame, out_dir: str, scale: float, unit: str) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for name, _, fig in figures(frame, scale, unit):
        path = os.path.join(out_dir, name)
        fig.savefig(path, dpi=100, bbox_inches="tight")
        plt.close(fig)
        paths.append(path)
    return paths


def svg(fig) -> str:
    """The figure as an inline <svg> element (no XML prolog, no external reference)."""
    buf = io.StringIO()
    # no RDF metadata block (creator, date): the page stays the same for the same run, and has no
    # address in it beside the SVG namespace names (which are names, never fetched)
    fig.savefig(buf, format="svg", bbox_inches="tight",
                metadata={"Creator": None, "Date": None, "Format": None, "Type": None})
    plt.close(fig)
    text = buf.getvalue()
    return _with_tips(text[text.index("<svg"):], getattr(fig, "collbench_tips", {}))


def _with_tips(text: str, tips: dict[str, list[str]]) -> str:
    """Each point's value as the <title> of its marker (a <use> inside the line's group, in data
    order): the browser shows it on hover."""
    for gid, labels in tips.items():
        start = text.find(f'<g id="{gid}">')
        end = _group_end(text, start) if start >= 0 else -1
        group = text[start:end]
        if end < 0 or group.count("<use ") != len(labels):  # a marker short (or extra): no label misplaced
            continue
        parts = group.split("<use ")
        for i, label in enumerate(labels, 1):
            close = parts[i].index("/>")
            parts[i] = parts[i][:close] + f"><title>{html.escape(label)}</title></use>" + parts[i][close + 2:]
        text = text[:start] + "<use ".join(parts) + text[end:]
    return text


def _group_end(text: str, start: int) -> int:
    """Where the <g> element opening at `start` closes (after its </g>), nested groups counted; -1 if never."""
    depth = 0
    for m in re.finditer(r"<g[\s>]|</g>", text[start:]):
        depth += -1 if m.group() == "</g>" else 1
        if depth == 0:
            return start + m.end()
    return -1


def _pair_rows(frame: Frame):
    df = scores.ok_rows(frame.df)
    coll = "all_reduce" if "all_reduce" in set(df.collective) else (df.collective.iloc[0] if len(df) else None)
    return df[df.collective == coll], coll


def _heatmap(frame: Frame, scale: float, unit: str):
    df, coll = _pair_rows(frame)
    pairs = df[(df.pattern == "pairwise") | ((df.pattern == "inter") & (df.world_size == 2))]
    if pairs.empty:
        return None
    pairs = pairs[pairs.msg_bytes == pairs.msg_bytes.max()]
    leaves = frame.leaves or {}  # with a switch tree: ordered by leaf, its borders drawn
    nodes = sorted(set(pairs.node_first) | set(pairs.node_last), key=lambda c: (leaves.get(c, ""), frame.nodes[c]))
    index = {c: i for i, c in enumerate(nodes)}
    grid = np.full((len(nodes), len(nodes)), np.nan)
    agg = pairs.groupby(["node_first", "node_last"], observed=True).busbw_gbps.median()
    for (a, b), bw in agg.items():
        grid[index[a], index[b]] = grid[index[b], index[a]] = bw * scale
    labels = [frame.label(c) for c in nodes] if len(nodes) <= LABELLED_NODES else None
    title = (f"{coll} {format_bytes(int(pairs.msg_bytes.iloc[0]))}: busbw of every node pair, run "
             f"{frame.df.run_id.iloc[0]} ({len(nodes)} nodes)")
    fig = _matrix(grid, labels, title, f"busbw ({unit})", HEATMAP_INCHES)
    for i in range(1, len(nodes)):
        if leaves and leaves.get(nodes[i]) != leaves.get(nodes[i - 1]):
            for line in (fig.axes[0].axhline, fig.axes[0].axvline):
                line(i - 0.5, color="white", linewidth=2)
    return "pairwise_heatmap.png", title, fig


def _gpu_pairs(frame: Frame, scale: float, unit: str):
    """Every GPU pair inside the nodes (intra-pairwise): the median over nodes of each (i, j)."""
    df, coll = _pair_rows(frame)
    pairs = df[(df.pattern == "intra-pairwise") & (df.local_first >= 0)]
    if pairs.empty:
        return None
    pairs = pairs[pairs.msg_bytes == pairs.msg_bytes.max()]
    n = int(max(pairs.local_first.max(), pairs.local_last.max())) + 1
    grid = np.full((n, n), np.nan)
    for (a, b), bw in pairs.groupby(["local_first", "local_last"], observed=True).busbw_gbps.median().items():
        grid[int(a), int(b)] = grid[int(b), int(a)] = bw * scale
    title = (f"{coll} {format_bytes(int(pairs.msg_bytes.iloc[0]))}: busbw of every GPU pair inside a node (median "
             f"over {pairs.node_first.nunique()} nodes)")
    return "gpu_pairs.png", title, _matrix(grid, [f"GPU {i}" for i in range(n)], title, f"busbw ({unit})", 6)


def _rails(frame: Frame, scale: float, unit: str):
    """Rails across nodes: the inter groups of several GPUs per node are one per local rank."""
    df, coll = _pair_rows(frame)
    # one GPU per node: across nodes, inside an NVLink domain or not
    inter = df[df.topology.isin(["inter", "intra-domain"]) & (df.pattern == "inter") & (df.local_first >= 0)]
    if inter.local_first.nunique() < 2:
        return None
    inter = inter[inter.msg_bytes == inter.msg_bytes.max()]
    by_rail = inter.groupby("local_first", observed=True).busbw_gbps.median() * scale
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar([f"rail {int(r)}" for r in by_rail.index], by_rail.values)
    ax.set_ylabel(f"busbw ({unit})")
    title = f"{coll} {format_bytes(int(inter.msg_bytes.iloc[0]))}: busbw of each rail (GPU i of every node)"
    ax.set_title(title, fontsize=9)
    ax.grid(True, axis="y", alpha=0.3)
    return "rails.png", title, fig


def _matrix(grid: np.ndarray, labels: list[str] | None, title: str, label: str, inches: float):
    fig, ax = plt.subplots(figsize=(inches, inches))
    im = ax.imshow(grid, cmap="viridis", interpolation="nearest")
    if labels is not None:
        ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=7)
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
    fig.colorbar(im, label=label, shrink=0.8)
    ax.set_title(title, fontsize=9)
    return fig
