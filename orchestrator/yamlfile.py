"""Reading a YAML file a user wrote (--config, --expected): one line naming the file and, for a
syntax error, the line and column."""

from __future__ import annotations

from orchestrator.errors import UsageError


def read(path: str, flag: str) -> object:
    import yaml

    try:
        with open(path) as fh:
            return yaml.safe_load(fh)
    except OSError as e:
        raise UsageError(f"{flag} {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise UsageError(f"{flag} {path}: not valid YAML{where} ({problem})") from None
