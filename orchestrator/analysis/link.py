"""A link: the devices a measurement crossed, as compare matches rows by it and watch and the
canary name its nodes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Link:
    """The devices a measurement crossed, in rank order: (node IP, local rank; None in rows written
    before local ranks were). Its text, the compare table's `link` column, is "ip:local,ip:local"
    (or "ip,ip"), made for a whole table at once by _links."""

    devices: tuple[tuple[str, int | None], ...]

    @classmethod
    def parse(cls, text: str) -> Link:
        devices = []
        for part in text.split(","):
            ip, _, local = part.rpartition(":") if ":" in part else (part, "", "")
            devices.append((ip, int(local) if local else None))
        return cls(tuple(devices))

    @property
    def nodes(self) -> frozenset[str]:
        """The node IPs it crossed."""
        return frozenset(ip for ip, _ in self.devices)

    def __str__(self) -> str:
        return ",".join(ip if local is None else f"{ip}:{local}" for ip, local in self.devices)
