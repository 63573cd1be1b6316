"""Plots of a run: busbw and latency versus message size per collective (one line per topology,
its world size in the legend), a node-by-node heatmap of pairwise busbw at a fixed figure size
whatever the node count, and where measured the busbw of every GPU pair inside the nodes and of
every rail across them. `figures` builds them; `write` saves them as PNG files (report --plots),
`svg` renders one inline (report --format html). Needs matplotlib (the `plot` extra)."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.fonttype"] = "path"  # glyphs as paths: an inline SVG needs no font
matplotlib.rcParams["svg.hashsalt"] = "collbench"  # the same run draws the same SVG
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from orchestrator.analysis import diagnosis, tables  # noqa: E402
from orchestrator.analysis.frame import Frame  # noqa: E402
from orchestrator.sweep.sizes import format_bytes  # noqa: E402

HEATMAP_INCHES = 10  # the heatmap's size: more nodes make smaller cells, not a bigger figure
LABELLED_NODES = 64  # above this many nodes the axes carry no node names


def figures(frame: Frame, scale: float, unit: str) -> Iterator[tuple[str, str, object]]:
    """(file name, caption, matplotlib figure) of every plot the run's rows allow."""
    df, run_id = frame.df, frame.df.run_id.iloc[0]
    for coll in dict.fromkeys(df.collective.dropna()):
        widest = diagnosis.ok_rows(df)[df.collective == coll].groupby("topology", observed=True).world_size.max()
        for value, ylabel, name in (("busbw_gbps", f"busbw ({unit})", "busbw"), ("time_us", "time (us)", "latency")):
            rows = tables.by_size(df, coll, value)
            if not rows:
                continue
            fig, ax = plt.subplots(figsize=(7, 4))
            for topo in diagnosis.topologies(df[df.collective == coll]):
                pts = [(r["msg_bytes"], r[topo] * (scale if value == "busbw_gbps" else 1)) for r in rows
                       if r.get(topo) is not None]
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=f"{topo} ({int(widest[topo])} ranks)")
            sizes = [r["msg_bytes"] for r in rows]
            _size_axis(ax, sizes)
            if value == "time_us":
                ax.set_yscale("log")
            title = f"{coll}: {name} from {format_bytes(min(sizes))} to {format_bytes(max(sizes))}, run {run_id}"
            ax.set_xlabel("message size")
            ax.set_ylabel(ylabel)
            ax.set_title(title, fontsize=9)
            ax.legend()
            ax.grid(True, alpha=0.3)
            yield f"{name}_{coll}.png", title, fig
    for made in (_heatmap(frame, scale, unit), _gpu_pairs(frame, scale, unit), _rails(frame, scale, unit)):
        if made is not None:
            yield made


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
    return text[text.index("<svg"):]


def _pair_rows(frame: Frame):
    df = diagnosis.ok_rows(frame.df)
    coll = "all_reduce" if "all_reduce" in set(df.collective) else (df.collective.iloc[0] if len(df) else None)
    return df[df.collective == coll], coll


def _heatmap(frame: Frame, scale: float, unit: str):
    df, coll = _pair_rows(frame)
    pairs = df[(df.pattern == "pairwise") | ((df.pattern == "inter") & (df.world_size == 2))]
    if pairs.empty:
        return None
    pairs = pairs[pairs.msg_bytes == pairs.msg_bytes.max()]
    nodes = sorted(set(pairs.node_first) | set(pairs.node_last), key=lambda c: frame.nodes[c])
    index = {c: i for i, c in enumerate(nodes)}
    grid = np.full((len(nodes), len(nodes)), np.nan)
    agg = pairs.groupby(["node_first", "node_last"], observed=True).busbw_gbps.median()
    for (a, b), bw in agg.items():
        grid[index[a], index[b]] = grid[index[b], index[a]] = bw * scale
    labels = [frame.label(c) for c in nodes] if len(nodes) <= LABELLED_NODES else None
    title = (f"{coll} {format_bytes(int(pairs.msg_bytes.iloc[0]))}: busbw of every node pair, run "
             f"{frame.df.run_id.iloc[0]} ({len(nodes)} nodes)")
    return "pairwise_heatmap.png", title, _matrix(grid, labels, title, f"busbw ({unit})", HEATMAP_INCHES)


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
