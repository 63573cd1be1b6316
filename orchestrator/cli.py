"""`collbench` command line: parse, dispatch to one subcommand, turn a user error into exit 2."""

from __future__ import annotations

import argparse
import os
import select
import sys
import warnings

from orchestrator import __version__
from orchestrator.commands import (
    attach,
    compare,
    doctor,
    import_,
    lab,
    plan,
    predict,
    qualify,
    replay,
    report,
    run,
    watch,
)
from orchestrator.errors import CollbenchWarning, ConnectTimeout, RenamedOption, UsageError
from orchestrator.operations import take_stop_signal


class _Parser(argparse.ArgumentParser):
    """Bad arguments: exit 2 with one line naming the problem (no usage dump)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"collbench: error: {message}\n")

    def _get_values(self, action, arg_strings):
        # `--dp=--`: argparse drops the '--' and hands the option an empty list, unconverted
        if arg_strings == ["--"] and action.nargs is None and action.option_strings:
            self.error(f"argument {'/'.join(action.option_strings)}: expected a value, not '--'")
        return super()._get_values(action, arg_strings)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="collbench",
        description="Cluster-wide benchmarks of collective communication (NCCL on GPUs, gloo on CPUs) on Ray.",
    )
    parser.add_argument("--version", action="version", version=f"collbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module in (run, qualify, watch, doctor, replay, plan, report, compare, predict, import_, attach, lab):
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    stdout = sys.stdout
    sys.stdout = _QuietWhenClosed(stdout)
    take_stop_signal()  # SIGUSR1 ends a run after its round (execution/signals.py), never the process at once
    try:
        return _dispatch(argv)
    except BrokenPipeError:
        if not _stdout_closed():
            raise
        _discard_stdout()  # a write to the closed stdout that did not go through sys.stdout
        return 1
    finally:
        sys.stdout.flush()
        sys.stdout = stdout


def _dispatch(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    with warnings.catch_warnings():  # what the code below says as a warning, the command line says in one line
        warnings.simplefilter("always", CollbenchWarning)
        warnings.showwarning = _one_line(warnings.showwarning)
        try:
            return args.handler(args)
        except UsageError as e:
            print(f"collbench: error: {e}", file=sys.stderr)
            if isinstance(e, ConnectTimeout):  # Ray's exit hooks would wait on the join stuck in its thread
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(e.exit_code)
            return e.exit_code


def _one_line(shown):
    """warnings.showwarning that prints a CollbenchWarning as `collbench: warning: ...`, an old
    spelling as `collbench: note: ...` (others as before)."""
    def show(message, category, *rest) -> None:
        if issubclass(category, RenamedOption):
            print(f"collbench: note: {message}", file=sys.stderr)
        elif issubclass(category, CollbenchWarning):
            print(f"collbench: warning: {message}", file=sys.stderr)
        else:
            shown(message, category, *rest)

    return show


class _QuietWhenClosed:
    """sys.stdout for a command whose reader may leave early (`collbench report R | head -1`):
    once the pipe is closed, the rest of the output goes to /dev/null, so the command runs to
    its end and exits with its own code, without a traceback or Python's message at exit."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            _discard_stdout()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            _discard_stdout()
            self._stream.flush()  # what was buffered goes to /dev/null now

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone."""
    try:
        poll = select.poll()
        poll.register(1, select.POLLOUT)
        return any(events & select.POLLERR for _, events in poll.poll(0))
    except (AttributeError, OSError):
        return False


def _discard_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
