"""The use cases that both faces, the command line (`commands/`) and the Python API (`api.py`),
call: run (and resume), replay, qualify's options and sweep, watch (a composite of the others),
doctor, plan, predict, report, compare and import. Each takes options that check themselves when
made (a bad value raises UsageError naming it, in the one line the command prints; `sweeps.Sweeps`:
which sweep fields a command takes and its defaults, one merge for both faces), so a value is
checked in one place whichever face it came through. Below them: the Ray port (`execution/`: the
bodies that measure, jobs.sweep and qualifying.qualification), the results store, the planner and
the judges, none of which imports an operation (tests/unit/test_layers.py)."""
