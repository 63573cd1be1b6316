"""PNG plots of a run: busbw and latency versus message size per collective (one line per
topology, its world size in the legend), and a node-by-node heatmap of pairwise busbw at a fixed
figure size whatever the node count. Needs matplotlib (the `plot` extra)."""

from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from orchestrator.analysis import diagnosis  # noqa: E402
from orchestrator.analysis.frame import Frame  # noqa: E402
from orchestrator.sweep.sizes import format_bytes  # noqa: E402

HEATMAP_INCHES = 10  # the heatmap's size: more nodes make smaller cells, not a bigger figure
LABELLED_NODES = 64  # above this many nodes the axes carry no node names


def write(frame: Frame, out_dir: str, scale: float, unit: str) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    df, run_id = frame.df, frame.df.run_id.iloc[0]
    paths = []
    for coll in dict.fromkeys(df.collective.dropna()):
        widest = diagnosis.ok_rows(df)[df.collective == coll].groupby("topology").world_size.max()
        for value, ylabel, name in (("busbw_gbps", f"busbw ({unit})", "busbw"), ("time_us", "time (us)", "latency")):
            rows = diagnosis.by_size(df, coll, value)
            if not rows:
                continue
            fig, ax = plt.subplots(figsize=(7, 4))
            for topo in diagnosis.TOPOLOGIES:
                pts = [(r["msg_bytes"], r[topo] * (scale if value == "busbw_gbps" else 1)) for r in rows
                       if r[topo] is not None]
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=f"{topo} ({int(widest[topo])} ranks)")
            ax.set_xscale("log", base=2)
            if value == "time_us":
                ax.set_yscale("log")
            sizes = [r["msg_bytes"] for r in rows]
            ax.set_xlabel("msg_bytes")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{coll}: {name} from {format_bytes(min(sizes))} to {format_bytes(max(sizes))}, run {run_id}",
                         fontsize=9)
            ax.legend()
            ax.grid(True, alpha=0.3)
            paths.append(_save(fig, out_dir, f"{name}_{coll}.png"))
    path = _heatmap(frame, out_dir, scale, unit)
    return paths + ([path] if path else [])


def _heatmap(frame: Frame, out_dir: str, scale: float, unit: str) -> str | None:
    df = diagnosis.ok_rows(frame.df)
    coll = "all_reduce" if "all_reduce" in set(df.collective) else (df.collective.iloc[0] if len(df) else None)
    pairs = df[(df.collective == coll) & ((df.pattern == "pairwise") | ((df.pattern == "inter") & (df.world_size == 2)))]
    if pairs.empty:
        return None
    pairs = pairs[pairs.msg_bytes == pairs.msg_bytes.max()]
    nodes = sorted(set(pairs.node_first) | set(pairs.node_last), key=lambda c: frame.nodes[c])
    index = {c: i for i, c in enumerate(nodes)}
    grid = np.full((len(nodes), len(nodes)), np.nan)
    agg = pairs.groupby(["node_first", "node_last"]).busbw_gbps.median()
    for (a, b), bw in agg.items():
        grid[index[a], index[b]] = grid[index[b], index[a]] = bw * scale
    fig, ax = plt.subplots(figsize=(HEATMAP_INCHES, HEATMAP_INCHES))
    im = ax.imshow(grid, cmap="viridis", interpolation="nearest")
    if len(nodes) <= LABELLED_NODES:
        labels = [frame.label(c) for c in nodes]
        ax.set_xticks(range(len(nodes)), labels, rotation=90, fontsize=7)
        ax.set_yticks(range(len(nodes)), labels, fontsize=7)
    fig.colorbar(im, label=f"busbw ({unit})", shrink=0.8)
    ax.set_title(f"{coll} {format_bytes(int(pairs.msg_bytes.iloc[0]))}: busbw of every node pair, run "
                 f"{frame.df.run_id.iloc[0]} ({len(nodes)} nodes)", fontsize=9)
    return _save(fig, out_dir, "pairwise_heatmap.png")


def _save(fig, out_dir: str, name: str) -> str:
    path = os.path.join(out_dir, name)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path
