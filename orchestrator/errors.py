"""The project's one user-error type, and the one way to say an exception in one line."""

from __future__ import annotations

import warnings


class UsageError(ValueError):
    """Bad input or an unusable environment. str() is the one line shown to the user; the CLI
    prints it after `collbench: error:` and exits with `exit_code`, before anything is written."""

    exit_code = 2


class RunStopped(UsageError):
    """The environment stopped a run that had started (its lock taken over, ...): said in one line
    like a usage error, exit 1 (the input was fine)."""

    exit_code = 1


class ConnectTimeout(UsageError):
    """ray.init did not return by the deadline (a listener that speaks gRPC but is not a GCS). The
    join is still stuck in a daemon thread: the command line says the line and ends its process
    with os._exit (Ray's exit hooks would wait on that join); a Python caller's process goes on."""


class CollbenchWarning(UserWarning):
    """A problem said and gone past (a results file that cannot be read is left out): the command
    line prints it as `collbench: warning: ...`; a Python caller filters it as any warning."""


class RenamedOption(CollbenchWarning):
    """An old spelling of an option, a key or a what-if, still taken for one release: the command
    line says it as `collbench: note: ...`; a Python caller sees a warning it can filter."""


def renamed(old: str, now: str) -> None:
    """Say that `old` is now `now` and goes in the next release (one line, once per use)."""
    warnings.warn(f"{old} is now {now}; it goes in the next release", RenamedOption, stacklevel=3)


def first_line(e: BaseException) -> str:
    """The first non-empty line of an exception's message, or its type's name when it has none.
    Ray wraps a remote exception: its `cause` (the worker's own exception) is what is said."""
    cause = getattr(e, "cause", None)
    if isinstance(cause, BaseException):
        e = cause
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[0] if lines else type(e).__name__


def one_line(e: BaseException) -> str:
    """The exception's type and first line (Ray's wrapper unwrapped), for rows and summaries."""
    cause = getattr(e, "cause", None)
    name = type(cause if isinstance(cause, BaseException) else e).__name__
    return f"{name}: {first_line(e)}"[:300]
