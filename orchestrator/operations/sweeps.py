"""The one merge of a command's sweep: which SweepSpec fields a command takes, its own defaults,
and the caller's options, the same for the command line, a --config file and the Python API."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from orchestrator.errors import UsageError
from orchestrator.results.location import resolve_output
from orchestrator.sweep.spec import (
    MAX_MSG_BYTES,
    SweepSpec,
    brief_repr,
    convert,
    field_of,
    from_mapping,
    key_of,
    read_config,
    shown,
    spec_fields,
)

# The options' declaration as the faces read it (their parsers, helps and the API's keywords): through
# this use-case module, so that a face imports nothing of the driver below operations/
__all__ = ["MAX_MSG_BYTES", "NONE", "SweepSpec", "Sweeps", "field_of", "from_command_line", "key_of", "read_config",
           "resolved", "shown", "spec_fields"]

NONE: Mapping[str, Any] = MappingProxyType({})


@dataclasses.dataclass(frozen=True)
class Sweeps:
    """What one command takes of a sweep: `fields` (SweepSpec field names; its command line's
    sweep options and its --config keys) and `defaults` (its own, where they differ from a run's)."""

    command: str
    fields: tuple[str, ...]
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=lambda: NONE)

    def spec(self, base: SweepSpec | None = None, options: Mapping[str, Any] = NONE,
             source: str = "collbench.api") -> SweepSpec:
        """The command's defaults with the `options` (keys as in a --config file) over them; or,
        given a caller's own spec `base`, that spec as it is with the options over it (the
        command's defaults never replace what the caller set). A key, or a field `base` sets, that
        the command does not take is refused, naming it, as its flag is on the command line (but
        `output`, which a command that writes nothing ignores)."""
        values = from_mapping(dict(options), source=source, only=self.fields, command=self.command)
        if base is None:
            made = SweepSpec(**{**self.defaults, **values})
        else:
            plain = SweepSpec()
            for f in spec_fields():
                value = getattr(base, f.name)
                # where results go is no matter to a command that writes none (plan, doctor): a
                # caller's sweep made by api.spec (its output made absolute) is taken as it is
                if f.name not in self.fields and f.name != "output" and value != getattr(plain, f.name):
                    shown = ",".join(map(str, value)) if isinstance(value, tuple) else brief_repr(value)
                    raise UsageError(f"{source}: {key_of(f)} {shown} in the sweep given: not an option of "
                                     f"{self.command} (its keys: {self.keys})")
            made = dataclasses.replace(base, **values)
        return resolved(made)

    @property
    def keys(self) -> str:
        return ", ".join(key_of(f) for f in spec_fields() if f.name in self.fields)


def resolved(spec: SweepSpec) -> SweepSpec:
    """`spec` with its output where it will be written (a local folder made absolute), as both
    faces give it to an operation."""
    return dataclasses.replace(spec, output=resolve_output(spec.output))


def from_command_line(raw: Mapping[str, Any], config: str | None, defaults: Mapping[str, Any] = NONE,
                      only: tuple[str, ...] | None = None, command: str | None = None) -> SweepSpec:
    """A command line's sweep: the command's `defaults` (over the spec's), then the --config file
    (its keys checked against `only`, named as `command`'s), then the options given (`raw`: field
    name -> the text typed, None where absent); the output resolved as the API's."""
    values = dict(defaults)
    if config:
        values.update(from_mapping(read_config(config), source=f"--config {config}", only=only, command=command))
    for f in spec_fields():
        if raw.get(f.name) is not None:
            values[f.name] = convert(f, raw[f.name])
    return resolved(SweepSpec(**values))
