"""How a run ends on a signal. SIGTERM (`ray job stop`, `scancel`, a supervisor) ends it as Ctrl-C
does: at once, keeping what the groups in flight finished. SIGUSR1 (Slurm's `#SBATCH
--signal=USR1@120`, sent ahead of a time limit) ends it after the round in flight: no group is cut
short and none more starts (Runner.run asks `stop_requested` between rounds). Either way the
manifest says interrupted and the resume line is printed. Handlers are set by the session on the
main thread only (a caller's thread, the Python API, keeps its process's)."""

from __future__ import annotations

import signal
import threading

# Whether SIGTERM came. Ray turns an exception raised by a signal handler while the driver waits
# in ray.wait/ray.get into a new, plain KeyboardInterrupt (its check_signals), so the exception
# that arrives may not be the Terminated raised here.
_came = {"term": False, "usr1": False}


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled as Ctrl-C is; the process exits 128 + 15."""

    exit_code = 143


class StopRequested(KeyboardInterrupt):
    """SIGUSR1 came and the round in flight has ended; the process exits 128 + 10."""

    exit_code = 138


def _on_term(signum, frame) -> None:
    _came["term"] = True
    raise Terminated()


def _on_usr1(signum, frame) -> None:
    _came["usr1"] = True


def take_stop_signal() -> None:
    """SIGUSR1 noted for the command line's whole life (its default would end the process at once,
    before or after a session: a Slurm job's early warning must not kill what it warns). Main thread only."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGUSR1, _on_usr1)


def install() -> dict | None:
    """Take SIGTERM and SIGUSR1 (forgetting any that came before); the handlers they had, or None
    off the main thread."""
    _came.update(term=False, usr1=False)
    if threading.current_thread() is not threading.main_thread():
        return None
    return {signal.SIGTERM: signal.signal(signal.SIGTERM, _on_term),
            signal.SIGUSR1: signal.signal(signal.SIGUSR1, _on_usr1)}


def restore(previous: dict | None) -> None:
    for signum, handler in (previous or {}).items():
        if handler is not None:  # None: a handler set from C, which Python cannot set back
            signal.signal(signum, handler)


def stop_requested() -> bool:
    """SIGUSR1 came: end the run once the round in flight has."""
    return _came["usr1"]


def exit_code(e: KeyboardInterrupt) -> int:
    """The command's exit code for the interrupt that ended it (130: Ctrl-C)."""
    return 143 if _came["term"] else getattr(e, "exit_code", 130)
