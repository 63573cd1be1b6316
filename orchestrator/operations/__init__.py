"""The operations that both faces, the command line (`commands/`) and the Python API (`api.py`),
call: each takes a frozen options dataclass that checks itself when made (a bad value raises
UsageError naming it, in the one line the command prints), so a value is checked in one place
whichever face it came through. They read stored results and never touch Ray; the run-like
operations (a sweep, a qualification, a watch) are bodies in `execution/`, which reuses these."""
