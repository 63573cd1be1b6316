"""Reading a YAML file a user wrote (--config, --expected): one line naming the file and, for a
syntax error, the line and column."""

from __future__ import annotations

from orchestrator.errors import UsageError

MAX_YAML_BYTES = 16 << 20  # a sweep or expected-values file is a few KB; /dev/zero is endless
MAX_YAML_DEPTH = 64  # collections inside collections; settings nest three or four deep


def read_bytes(path: str, flag: str, kind: str) -> bytes:
    """A file a user named, bounded before it is read whole (`kind`: what it should have been)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_YAML_BYTES + 1)
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot read it ({e.strerror or e})") from None
    except ValueError as e:  # a NUL in the path
        raise UsageError(f"{flag} {path!r}: {e}") from None
    if len(data) > MAX_YAML_BYTES:
        raise UsageError(f"{flag} {path}: larger than {MAX_YAML_BYTES >> 20} MiB, not {kind}")
    return data


def read(path: str, flag: str) -> object:
    import yaml

    data = read_bytes(path, flag, "a YAML file of settings")
    try:
        _within_depth(yaml, data, f"{flag} {path}")  # before building: 10,000 '[' would recurse for a second
        return yaml.safe_load(data)  # bytes: YAML's own encoding detection; binary data is a ReaderError
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or getattr(e, "reason", None) or str(e).splitlines()[0]
        raise UsageError(f"{flag} {path}: not valid YAML{where} ({problem})") from None
    except RecursionError:
        raise UsageError(f"{flag} {path}: not valid YAML (nested too deeply)") from None


def _within_depth(yaml, data: bytes, what: str) -> None:
    """Refuse a document nested deeper than MAX_YAML_DEPTH, read as a stream of events (the parser
    is a loop; building the document recurses once per level)."""
    depth = 0
    for event in yaml.parse(data, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise UsageError(f"{what}: not valid YAML (nested deeper than {MAX_YAML_DEPTH})")
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1
