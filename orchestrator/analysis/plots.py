"""PNG plots of a run: busbw versus message size per collective (one line per topology), and a
node-by-node heatmap of pairwise busbw. Needs matplotlib (the `plot` extra)."""

from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from orchestrator.analysis import diagnosis  # noqa: E402


def write(df: pd.DataFrame, out_dir: str, scale: float, unit: str) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for coll in dict.fromkeys(df.collective):
        rows, _ = diagnosis.headline(df, coll)
        if not rows:
            continue
        fig, ax = plt.subplots(figsize=(7, 4))
        for topo in diagnosis.TOPOLOGIES:
            pts = [(r["msg_bytes"], r[topo] * scale) for r in rows if r[topo] is not None]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=topo)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("msg_bytes")
        ax.set_ylabel(f"busbw ({unit})")
        ax.set_title(f"{coll}: busbw by message size")
        ax.legend()
        ax.grid(True, alpha=0.3)
        path = os.path.join(out_dir, f"busbw_{coll}.png")
        fig.savefig(path, dpi=100, bbox_inches="tight")
        plt.close(fig)
        paths.append(path)
    pairs = diagnosis.pair_results(df, "all_reduce" if "all_reduce" in set(df.collective) else df.collective.iloc[0])
    if len(pairs):
        labels = sorted({lbl for m in pairs.labels for lbl in m.values()})  # noqa: C416
        index = {lbl: i for i, lbl in enumerate(labels)}
        grid = np.full((len(labels), len(labels)), np.nan)
        for _, p in pairs.iterrows():
            a, b = (index[p.labels[n]] for n in p.nodes)
            grid[a, b] = grid[b, a] = p.busbw_gbps * scale
        fig, ax = plt.subplots(figsize=(1 + 0.5 * len(labels), 1 + 0.5 * len(labels)))
        im = ax.imshow(grid, cmap="viridis")
        ax.set_xticks(range(len(labels)), labels, rotation=90)
        ax.set_yticks(range(len(labels)), labels)
        fig.colorbar(im, label=f"busbw ({unit})")
        ax.set_title("pairwise busbw")
        path = os.path.join(out_dir, "pairwise_heatmap.png")
        fig.savefig(path, dpi=100, bbox_inches="tight")
        plt.close(fig)
        paths.append(path)
    return paths
