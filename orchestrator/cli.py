"""`collbench` command line: parse, dispatch to one subcommand, turn a user error into exit 2."""

from __future__ import annotations

import argparse
import sys

from orchestrator.commands import compare, lab, plan, predict, qualify, report, run
from orchestrator.errors import UsageError


class _Parser(argparse.ArgumentParser):
    """Bad arguments: exit 2 with one line naming the problem (no usage dump)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"collbench: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="collbench",
        description="Cluster-wide benchmarks of collective communication (NCCL on GPUs, gloo on CPUs) on Ray.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module in (run, qualify, plan, report, compare, predict, lab):
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    try:
        return args.handler(args)
    except UsageError as e:
        print(f"collbench: error: {e}", file=sys.stderr)
        return e.exit_code
