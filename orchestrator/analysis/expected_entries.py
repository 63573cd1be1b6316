"""The expected catalogue: entries of the bus bandwidth a healthy platform reaches per path, each
with its source (expected.yaml, shipped), the user's (--expected FILE) and what a cluster declared;
read and checked here, and the one that applies to a measurement found (`find`): by platform tag,
collective, topology, size, world size, the transport's text and its class (transport_class); the
most specific wins. Judged against the rows in analysis.expected. Pure but for reading YAML.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from orchestrator import yamlfile
from orchestrator.analysis.transport_class import CLASSES, matches
from orchestrator.errors import UsageError
from orchestrator.sweep.sizes import parse_bytes
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
    transport: str | None = None  # text in the row's transport columns (a plugin's name: GPUDirectTCPX)
    transport_class: str | None = None  # NVLink, NVLS, MNNVL, PCIe, SHM, IB, RoCE, EFA, TCP (transport_class.py)
    meaning: str = "typical"
    source: str = ""
    origin: str = "shipped"

    def applies(self, tags: set[str], collective: str, topology: str, msg_bytes: int, world: int,
                transports: str, row_class: str | None = None) -> bool:  # a row of unknown class: as ASSUMED
        return ((self.platform == "*" or self.platform in tags) and self.collective in ("*", collective)
                and self.topology == topology and msg_bytes >= self.min_bytes and world >= self.min_world
                and (self.transport is None or self.transport in transports)
                and matches(self.transport_class, row_class, topology))

    def rank(self) -> tuple:
        """Precedence: origin, then platform, collective and transport named, then larger sizes."""
        return (-ORIGINS.index(self.origin), self.platform != "*", self.collective != "*",
                self.transport is not None or self.transport_class is not None, self.min_world, self.min_bytes)


_FIELDS = {f for f in Entry.__dataclass_fields__ if f != "origin"}
_TEXT_FIELDS = ("collective", "platform", "meaning", "source", "transport", "transport_class")


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
        if item.get("transport_class") not in (None, *CLASSES):
            raise UsageError(f"{at}: transport_class {brief_repr(item['transport_class'])}: one of "
                             f"{', '.join(CLASSES)}")
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
        out.append(Entry(**{k: (str(v) if k in _TEXT_FIELDS and v is not None else v) for k, v in values.items()},
                         origin=origin))
    return out


def load(path: str, origin: str) -> list[Entry]:
    data = yamlfile.read(path, "--expected")
    return parse(data, f"--expected {path}" if origin == "user" else path, origin)


def shipped() -> list[Entry]:
    return load(SHIPPED, "shipped")


def find(entries: list[Entry], tags: set[str], collective: str, topology: str, msg_bytes: int, world: int,
         transports: str = "", row_class: str | None = None) -> Entry | None:
    """The most specific entry that applies, or None."""
    fits = [e for e in entries if e.applies(tags, collective, topology, msg_bytes, world, transports, row_class)]
    return max(fits, key=Entry.rank) if fits else None
