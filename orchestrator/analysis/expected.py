"""Expected bus bandwidth per platform and path, and how far each measurement is from it.

Entries come from three places, the first that applies winning: the user's `--expected FILE`,
what the cluster declared when the run started (a collbench lab: its shaped link rate; in the
manifest), and the table shipped with collbench (expected.yaml, each entry with its source).
An entry applies to a row by platform tag, collective, topology, minimum size and world size and,
where given, the transport NCCL used and its class (analysis.expected_entries, transport_class;
docs/guides/expected.md); the most specific one wins. Pure; no Ray, no I/O but reading the YAML files.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from orchestrator.analysis import grouping, transport_class
from orchestrator.analysis.diagnosis import Flag, FlagKind
from orchestrator.analysis.expected_entries import TOPOLOGIES, Entry, find, load, parse, shipped
from orchestrator.analysis.explain import COLUMNS as EXPLAINED
from orchestrator.analysis.explain import Reason, explain
from orchestrator.analysis.frame import Frame
from orchestrator.analysis.scores import ok_rows, where
from orchestrator.sweep.sizes import format_bytes

__all__ = ["TOPOLOGIES", "Entry", "Evaluation", "evaluate", "find", "intra_vs_inter", "load", "parse", "shipped"]

TOP_BELOW = 20  # below_expected groups of one shape flagged one by one, the worst first


@dataclass
class Evaluation:
    table: list[dict] = field(default_factory=list)
    flags: list[Flag] = field(default_factory=list)
    uncovered: list[str] = field(default_factory=list)  # platforms no entry applied to


def evaluate(frame: Frame, entries: list[Entry], min_fraction: float, facts: dict[str, dict] | None = None
             ) -> Evaluation:
    """Every ok row beside the entry that applies to it: the `expected` table (median busbw of
    each collective, topology, world size and size), and a below_expected flag for every group
    whose busbw at its largest covered size is under min_fraction of the entry. A shape measured
    only below the size an entry holds from gets one row at its largest size, beside that entry,
    said latency-bound. Every row and flag carries the `reasons` for its gap (analysis.explain;
    `facts`: the nodes' doctor facts, by IP)."""
    df = ok_rows(frame.df)
    if df.empty or "platform" not in df:
        return Evaluation()
    keys = ["platform", "collective", "topology", "world_size", "msg_bytes"]
    links = ["intra_transport", "net_transport"] if "net_transport" in df else []  # "intra net", as entries match
    platform = df.platform
    if isinstance(platform.dtype, pd.CategoricalDtype) and "" not in platform.cat.categories:
        platform = platform.cat.add_categories([""])  # a categorical takes no value it lacks
    used = {*keys, *links, *EXPLAINED, "busbw_gbps", "group", "node_first", "node_last", "pattern"}
    d = df[[c for c in df.columns if c in used]].assign(platform=platform.fillna(""))  # what the groupings copy

    fabric = transport_class.fabric_of(facts)  # RoCE or IB behind NCCL's "IB"

    def lookup_for(key, size: int) -> Entry | None:
        transports = " ".join(v if isinstance(v, str) else "" for v in (key[c] for c in links))
        row_class = transport_class.of(key.topology, *(key[c] if isinstance(key[c], str) else None for c in links),
                                       fabric) if links else None
        return find(entries, set(key.platform.split("+")) if key.platform else set(), key.collective, key.topology,
                    size, int(key.world_size), transports, row_class)

    # one lookup per distinct key, spread to its rows by group number (no Python object per row)
    key_of_row, _ = grouping.codes(d, keys + links, dropna=False)
    found = [lookup_for(key, int(key.msg_bytes)) for _, key in grouping.keys(d[keys + links], key_of_row).iterrows()]
    d = d.assign(entry=np.array(found, dtype=object)[key_of_row],
                 entry_busbw=np.array([e.busbw_gbps if e else np.nan for e in found])[key_of_row])
    covered = where(d, d.entry.notna())
    out = Evaluation()
    shapes = ["platform", "collective", "topology", "world_size"]
    # each shape's sizes (no scan of every row per size: a sweep has dozens)
    for _, shape in covered.groupby(shapes, sort=True, observed=True):
        for size, g in shape.groupby("msg_bytes", sort=True, observed=True):
            out.table.append(_expected_row(frame, g, g.entry.iloc[0], min_fraction, facts,
                                           bigger=shape[shape.msg_bytes > size]))
    # shapes whose every size is below the size their entry holds from: the largest, latency-bound
    uncovered = where(d, d.entry.isna()) if len(covered) < len(d) else d.iloc[0:0]
    if len(uncovered):
        covered_shapes = set(covered[shapes].drop_duplicates().itertuples(index=False, name=None))
        for key, g in uncovered.groupby(shapes, sort=True, observed=True):
            if key in covered_shapes:
                continue
            top = g[g.msg_bytes == g.msg_bytes.max()]
            entry = lookup_for(top.iloc[0], 1 << 62)
            if entry is not None:
                out.table.append(_expected_row(frame, top, entry, min_fraction, facts, below_from=entry.min_bytes))
    covered_platforms = set(covered.platform.unique()) | {r["platform"] for r in out.table}
    out.uncovered = sorted(set(d.platform.unique()) - covered_platforms)
    out.flags = _below(frame, covered, shapes, min_fraction, facts)
    return out


def _below(frame: Frame, covered: pd.DataFrame, shapes: list[str], min_fraction: float, facts: dict | None,
           ) -> list[Flag]:
    """A below_expected flag for each group under min_fraction of its entry at its largest covered
    size: the worst TOP_BELOW of each shape one by one, with their reasons, in the run's order; the
    rest of a shape (a cluster whose every pair is slow has half a million) in one flag of their count."""
    top = where(covered, covered.msg_bytes == covered.groupby("group", observed=True).msg_bytes.transform("max"))
    heads = top.groupby("group", sort=False, observed=True).head(1)
    below = heads[heads.busbw_gbps < min_fraction * heads.entry_busbw]
    if below.empty:
        return []
    below = below.assign(fraction=below.busbw_gbps / below.entry_busbw)
    worst = below.sort_values("fraction", kind="stable").groupby(shapes, sort=True, observed=True)
    named = worst.head(TOP_BELOW)
    chosen = covered[covered.group.isin(named.group)]
    rows_of = dict(iter(chosen.groupby("group", sort=False, observed=True)))
    out = []
    for i, row in named.sort_index().iterrows():
        entry, nodes, group = row.entry, frame.node_codes(i), rows_of[row.group]
        why = explain(group[group.msg_bytes == row.msg_bytes], frame.ips(nodes), entry, facts,
                      bigger=group[group.msg_bytes > row.msg_bytes])
        out.append(Flag(
            FlagKind.BELOW_EXPECTED, frame.ips(nodes), [], row.collective, int(row.msg_bytes), float(row.busbw_gbps),
            entry.busbw_gbps,
            f"below expected: {row.pattern} group on {', '.join(frame.label(n) for n in nodes)}: {row.collective} "
            f"{format_bytes(int(row.msg_bytes))} busbw {row.busbw_gbps:.4g} GB/s, "
            f"{row.fraction:.0%} of the expected {entry.busbw_gbps:g} ({entry.meaning}, "
            f"{entry.origin}: {entry.source})", source=entry.source,
            extra={"fraction": float(row.fraction), "group_id": frame.group_id(int(row.group)),
                   "reasons": [r.to_json() for r in why]}))
    for _, rest in worst:
        rest = rest.iloc[TOP_BELOW:]
        if rest.empty:
            continue
        first, entry = rest.iloc[0], rest.entry.iloc[0]
        fraction = float(rest.fraction.median())
        out.append(Flag(
            FlagKind.BELOW_EXPECTED, [], [], first.collective, None, float(rest.busbw_gbps.median()), entry.busbw_gbps,
            f"below expected: {len(rest):,} more {first.collective} {first.topology} group(s) of "
            f"{int(first.world_size)} ranks (beyond the {TOP_BELOW} worst, flagged one by one) under "
            f"{min_fraction:.0%} of the expected {entry.busbw_gbps:g}: a median {fraction:.0%} of it; so many "
            "slow groups say the platform or its settings, not one node", source=entry.source,
            extra={"fraction": fraction, "groups": len(rest)}))
    return out


def _expected_row(frame: Frame, g: pd.DataFrame, entry: Entry, min_fraction: float, facts: dict | None,
                  bigger: pd.DataFrame | None = None, below_from: int | None = None) -> dict:
    """One row of the `expected` table: the median busbw of `g` (one shape at one size) beside
    `entry`, with the reasons for a gap (below_from: the size the entry holds from, when `g` is
    below it)."""
    busbw = float(g.busbw_gbps.median())
    size = int(g.msg_bytes.iloc[0])
    gap = busbw < min_fraction * entry.busbw_gbps
    ips = sorted(frame.ips(np.unique(np.concatenate([g.node_first.to_numpy(), g.node_last.to_numpy()]))))
    why = explain(g, ips, entry, facts, bigger=bigger)
    if below_from is not None:
        why = [Reason("latency_bound", f"measured up to {format_bytes(size)}; the reference holds from "
                      f"{format_bytes(below_from)}, where latency no longer dominates",
                      f"{entry.source}; run to {format_bytes(below_from)} or more (-e)"),
               *[r for r in why if r.kind not in ("unexplained", "latency_bound")]]
    elif not gap:  # no gap: only what makes the number read differently (NVLS) is worth saying
        why = [r for r in why if r.kind.startswith("nvls")]
    return {"platform": g.platform.iloc[0], "collective": g.collective.iloc[0], "topology": g.topology.iloc[0],
            "world_size": int(g.world_size.iloc[0]), "msg_bytes": size, "size": format_bytes(size), "busbw": busbw,
            "expected": entry.busbw_gbps, "pct_of_expected": 100 * busbw / entry.busbw_gbps,
            "transport_class": _class_said(g, entry), "meaning": entry.meaning,
            "origin": entry.origin, "source": entry.source, "reasons": [r.to_json() for r in why]}


def _class_said(g: pd.DataFrame, entry: Entry) -> str | None:
    """The class of the entry that judged `g`, said assumed where the rows' own class is unknown."""
    first = g.iloc[0]
    own = transport_class.of(first.topology, *(first[c] if c in g and isinstance(first[c], str) else None
                                                for c in ("intra_transport", "net_transport")))
    return entry.transport_class if entry.transport_class is None or own is not None else \
        f"{entry.transport_class} (assumed: the rows name no transport)"


def intra_vs_inter(table: list[dict]) -> list[dict]:
    """The seed question per collective: NVLink (intra) and the network (inter, else mixed) at the
    largest size with an entry, measured beside expected, and their ratios; where rows of nodes in
    one NVLink domain exist (an NVL72 rack), a second row sets intra beside intra-domain."""
    out = []
    rows = pd.DataFrame(table)
    if rows.empty:
        return out
    for coll, g in rows.groupby("collective", sort=False, observed=True):
        pick = {}
        for topo in TOPOLOGIES:
            t = g[g.topology == topo]
            if len(t):
                pick[topo] = t[t.msg_bytes == t.msg_bytes.max()].sort_values("world_size").iloc[-1]
        intra, net, domain = pick.get("intra"), pick.get("inter", pick.get("mixed")), pick.get("intra-domain")
        if net is not None or (intra is not None and domain is None):  # as without domains
            out.append(_intra_vs(coll, intra, net))
        if domain is not None:
            out.append(_intra_vs(coll, intra, domain))
    return out


def _intra_vs(coll: str, intra, net) -> dict:
    """One row of intra_vs_inter: intra beside `net` (inter, mixed or intra-domain), either None."""
    return {
        "collective": coll,
        "intra_busbw": None if intra is None else intra.busbw,
        "intra_expected": None if intra is None else intra.expected,
        "net_topology": None if net is None else net.topology,
        "net_busbw": None if net is None else net.busbw, "net_expected": None if net is None else net.expected,
        "measured_ratio": intra.busbw / net.busbw if intra is not None and net is not None else None,
        "expected_ratio": intra.expected / net.expected if intra is not None and net is not None else None,
        "reasons": [{**r, "message": f"{part}: {r['message']}"} for part, picked in (("intra", intra), ("net", net))
                    if picked is not None for r in picked.reasons],
    }
