"""The use cases that both faces, the command line (`commands/`) and the Python API (`api.py`),
call: run (and resume), replay, qualify (and preflight), watch (a composite of the others),
doctor, plan, predict, report, compare, import and the lab. Each takes options that check
themselves when made (a bad value raises UsageError naming it, in the one line the command prints;
`sweeps.Sweeps`: which sweep fields a command takes and its defaults, one merge for both faces), so
a value is checked in one place whichever face it came through, and returns a typed result. Below
them: the Ray port (`execution/`: connect, session, pool, runner and the body that measures a plan,
jobs.sweep), the results store, the planner and the judges, none of which imports an operation;
the faces import, of the driver, only this layer, errors and the options' declaration
(tests/unit/test_layers.py).

`Voice` is where an operation's own lines go: the faces pass COMMAND_LINE (stdout and stderr) or
QUIET (nothing)."""

from orchestrator.execution.signals import take_stop_signal
from orchestrator.execution.voice import COMMAND_LINE, QUIET, Voice

__all__ = ["COMMAND_LINE", "QUIET", "Voice", "take_stop_signal"]
