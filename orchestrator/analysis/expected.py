"""Expected bus bandwidth per platform and path, and how far each measurement is from it.

Entries come from three places, the first that applies winning: the user's `--expected FILE`,
what the cluster declared when the run started (a collbench lab: its shaped link rate; in the
manifest), and the table shipped with collbench (expected.yaml, each entry with its source).
An entry applies to a row by platform tag, collective, topology, minimum size and world size and,
where given, the transport NCCL used (docs/guides/expected.md); the most specific one wins.
Pure; no Ray, no I/O but reading the YAML files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from orchestrator import yamlfile
from orchestrator.analysis import grouping
from orchestrator.analysis.diagnosis import Flag, FlagKind
from orchestrator.analysis.explain import COLUMNS as EXPLAINED
from orchestrator.analysis.explain import Reason, explain
from orchestrator.analysis.frame import Frame
from orchestrator.analysis.scores import ok_rows, where
from orchestrator.errors import UsageError
from orchestrator.sweep.sizes import format_bytes, parse_bytes
from orchestrator.sweep.spec import MAX_RANKS, brief_repr
from workloads.registry import WORKLOADS

SHIPPED = os.path.join(os.path.dirname(__file__), "expected.yaml")
TOPOLOGIES = ("intra", "inter", "mixed", "intra-domain")  # intra-domain: nodes of one NVLink domain (NVL72)
ORIGINS = ("user", "declared", "shipped")  # precedence


@dataclass(frozen=True)
class Entry:
    topology: str
    busbw_gbps: float
    min_bytes: int = 0
    collective: str = "*"
    platform: str = "*"
    min_world: int = 1
    transport: str | None = None
    meaning: str = "typical"
    source: str = ""
    origin: str = "shipped"

    def applies(self, tags: set[str], collective: str, topology: str, msg_bytes: int, world: int,
                transports: str) -> bool:
        return ((self.platform == "*" or self.platform in tags) and self.collective in ("*", collective)
                and self.topology == topology and msg_bytes >= self.min_bytes and world >= self.min_world
                and (self.transport is None or self.transport in transports))

    def rank(self) -> tuple:
        """Precedence: origin, then platform, collective and transport named, then larger sizes."""
        return (-ORIGINS.index(self.origin), self.platform != "*", self.collective != "*",
                self.transport is not None, self.min_world, self.min_bytes)


_FIELDS = {f for f in Entry.__dataclass_fields__ if f != "origin"}
_TEXT_FIELDS = ("collective", "platform", "meaning", "source", "transport")


def _scalar(value: object) -> str:
    """A YAML number or text as text (2.5 for min_world stays '2.5', refused by int())."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise TypeError
    return str(value)


def parse(items: object, where: str, origin: str) -> list[Entry]:
    """Entries from YAML data: a list of mappings, or {entries: [...]}; UsageError naming the
    entry and field that is wrong."""
    if isinstance(items, dict):
        items = items.get("entries")
    if not isinstance(items, list):
        raise UsageError(f"{where}: expected a list of entries (collective, topology, min_bytes, busbw_gbps, ...)")
    out = []
    for i, item in enumerate(items, 1):
        at = f"{where}: entry {i}"
        if not isinstance(item, dict):
            raise UsageError(f"{at}: expected a mapping")
        unknown = sorted(set(item) - _FIELDS, key=str)  # YAML keys may be numbers or lists too
        if unknown:
            raise UsageError(f"{at}: unknown field {str(unknown[0])[:40]!r} (known: {', '.join(sorted(_FIELDS))})")
        for need in ("topology", "busbw_gbps"):
            if need not in item:
                raise UsageError(f"{at}: missing {need}")
        for name in _TEXT_FIELDS:
            if name in item and not isinstance(item[name], str) and not (name == "transport" and item[name] is None):
                raise UsageError(f"{at}: {name} {brief_repr(item[name])}: expected text")
        if item["topology"] not in TOPOLOGIES:
            raise UsageError(f"{at}: topology {brief_repr(item['topology'])}: one of {', '.join(TOPOLOGIES)}")
        if item.get("collective", "*") not in ("*", *WORKLOADS):  # a misspelt one would never apply
            raise UsageError(f"{at}: collective {brief_repr(item['collective'])}: one of *, {', '.join(WORKLOADS)}")
        values = dict(item)
        for name, default, read, what in (("busbw_gbps", None, float, "a number"),
                                          ("min_bytes", 0, parse_bytes, "a byte size such as 1M"),
                                          ("min_world", 1, int, "an integer")):
            raw = item.get(name, default)
            try:
                values[name] = read(_scalar(raw))
            except (TypeError, ValueError, OverflowError):
                raise UsageError(f"{at}: {name} {brief_repr(raw)}: expected {what}") from None
        if not 0 < values["busbw_gbps"] < 1e6:  # not nan, not inf: a number the report can divide by
            raise UsageError(f"{at}: busbw_gbps {brief_repr(item['busbw_gbps'])}: must be positive and below 1e6 GB/s")
        if not 1 <= values["min_world"] <= MAX_RANKS:
            raise UsageError(f"{at}: min_world {values['min_world']}: must be between 1 and {MAX_RANKS}")
        out.append(Entry(**{k: (str(v) if k in ("collective", "platform", "meaning", "source", "transport")
                                and v is not None else v) for k, v in values.items()}, origin=origin))
    return out


def load(path: str, origin: str) -> list[Entry]:
    data = yamlfile.read(path, "--expected")
    return parse(data, f"--expected {path}" if origin == "user" else path, origin)


def shipped() -> list[Entry]:
    return load(SHIPPED, "shipped")


def find(entries: list[Entry], tags: set[str], collective: str, topology: str, msg_bytes: int, world: int,
         transports: str = "") -> Entry | None:
    """The most specific entry that applies, or None."""
    fits = [e for e in entries if e.applies(tags, collective, topology, msg_bytes, world, transports)]
    return max(fits, key=Entry.rank) if fits else None


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

    def lookup_for(key, size: int) -> Entry | None:
        transports = " ".join(v if isinstance(v, str) else "" for v in (key[c] for c in links))
        return find(entries, set(key.platform.split("+")) if key.platform else set(), key.collective, key.topology,
                    size, int(key.world_size), transports)

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
            "expected": entry.busbw_gbps, "pct_of_expected": 100 * busbw / entry.busbw_gbps, "meaning": entry.meaning,
            "origin": entry.origin, "source": entry.source, "reasons": [r.to_json() for r in why]}


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
        "intra_busbw": None if intra is None else intra.busbw, "intra_expected": None if intra is None else intra.expected,
        "net_topology": None if net is None else net.topology,
        "net_busbw": None if net is None else net.busbw, "net_expected": None if net is None else net.expected,
        "measured_ratio": intra.busbw / net.busbw if intra is not None and net is not None else None,
        "expected_ratio": intra.expected / net.expected if intra is not None and net is not None else None,
        "reasons": [{**r, "message": f"{part}: {r['message']}"} for part, picked in (("intra", intra), ("net", net))
                    if picked is not None for r in picked.reasons],
    }
