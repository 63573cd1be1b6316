"""One life for every run-like operation (a sweep, a replay, a qualification, a watch cycle's
sweep): open the session, run the caller's body inside it, and close the run so that nothing is
lost whatever ends it. The ladder, once:
- Ctrl-C or SIGTERM while measuring (or compacting): the manifest says interrupted, the run's
  own line says where the rows are and how to go on (`interrupted_line`);
- a full disk, wherever it strikes: interrupted, in one line (`resume_hint` appended where the
  manifest exists);
- Ctrl-C before the workers started or while they were released: said (nothing measured yet, or
  the run had finished), the manifest's state kept;
- a placement that cannot be had: one line;
- a UsageError: raised as it is (nothing measured); anything else: the manifest marked failed, then
  raised.
The caller's result carries `state`, `exit_code` and `message`; `finished(result)` is left to the
caller, which alone knows its tally."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from orchestrator.errors import UsageError
from orchestrator.execution.voice import Voice
from orchestrator.results.schema import RunState


class Ended(Protocol):
    state: RunState
    exit_code: int
    message: str | None


def live(open_session: Callable[[], object], body: Callable[[object], None], result: Ended, *, voice: Voice,
         unit: str, interrupted_line: Callable[[object], str], resume_hint: str = "") -> tuple[object | None, bool]:
    """Run `body(session)` inside `open_session()`; (the session or None, whether it finished).
    When it did not, `result` says how it ended (state, exit code, the line said)."""
    from orchestrator.execution.pool import PlacementError
    from orchestrator.execution.session import is_disk_full, say_late_interrupt
    from orchestrator.execution.signals import exit_code

    session = None
    try:
        with open_session() as session:
            try:
                body(session)
            except KeyboardInterrupt as e:  # while measuring, or while compacting the rows
                session.interrupted()
                result.state, result.exit_code = RunState.INTERRUPTED, exit_code(e)
                result.message = interrupted_line(session)
                voice.warn("\n" + result.message)
                return session, False
            except (UsageError, PlacementError):
                raise
            except BaseException:  # a defect or the unexpected: the manifest says so before it goes on
                session.failed()
                raise
    except OSError as e:  # a full disk, where the workers were started, measured or released
        if session is None or not is_disk_full(e):
            raise
        said = session.stopped_by_full_disk(e)
        hint = f"; resume once there is room: {resume_hint}" if resume_hint and session.manifest else ""
        result.state, result.exit_code = RunState.INTERRUPTED, 1
        result.message = f"collbench: error: {said}{hint}"
        voice.warn(result.message)
        return session, False
    except KeyboardInterrupt as e:  # before the workers started, or while they were being released
        say_late_interrupt(session, unit, voice)
        result.state = RunState(session.manifest.get("state", RunState.INTERRUPTED)) if session else \
            RunState.INTERRUPTED
        result.exit_code = exit_code(e)
        return session, False
    except PlacementError as e:
        result.message = f"collbench: error: {e}"
        voice.warn(result.message)
        return session, False
    return session, True
