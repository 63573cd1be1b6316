"""`collbench` command line: parse, build, run, close. One subcommand per verb."""

from __future__ import annotations

import argparse
import sys

from orchestrator.sweep.spec import SpecError, SweepSpec, convert, from_mapping, spec_fields


class _Parser(argparse.ArgumentParser):
    """Bad arguments: exit 2 with one line naming the problem (no usage dump)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"collbench: error: {message}\n")


def add_spec_options(p: argparse.ArgumentParser) -> None:
    """One option per SweepSpec field, from the field's own flags and help."""
    g = p.add_argument_group("sweep options (also accepted as keys of a --config YAML file)")
    for f in spec_fields():
        flags, kind = f.metadata["flags"], f.metadata["kind"]
        default = f.default if not callable(f.default_factory) else f.default_factory()  # type: ignore[misc]
        shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
        help_text = f"{f.metadata['help']} (default: {shown if shown not in ('', None) else 'none'})"
        if kind == "bool":
            g.add_argument(*flags, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif kind == "env":
            g.add_argument(*flags, dest=f.name, action="append", default=None, metavar="NAME=VALUE", help=help_text)
        else:
            g.add_argument(*flags, dest=f.name, default=None, metavar=f.name.upper(), help=help_text)
    p.add_argument("--config", metavar="YAML", help="sweep file: keys are the option names above (min_bytes: 1K)")


def spec_from_args(args: argparse.Namespace) -> SweepSpec:
    """Defaults, then the --config file, then command-line options."""
    values = {}
    if args.config:
        values.update(from_mapping(_load_yaml(args.config), source=f"--config {args.config}"))
    for f in spec_fields():
        raw = getattr(args, f.name, None)
        if raw is not None:
            values[f.name] = convert(f, raw)
    return SweepSpec(**values)


def _load_yaml(path: str) -> dict:
    import yaml

    try:
        with open(path) as fh:
            data = yaml.safe_load(fh)
    except OSError as e:
        raise SpecError(f"--config {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise SpecError(f"--config {path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SpecError(f"--config {path}: expected a mapping of option names to values")
    return data


def build_parser() -> argparse.ArgumentParser:
    from orchestrator.commands import compare as compare_cmd
    from orchestrator.commands import lab as lab_cmd
    from orchestrator.commands import plan as plan_cmd
    from orchestrator.commands import predict as predict_cmd
    from orchestrator.commands import report as report_cmd
    from orchestrator.commands import run as run_cmd

    parser = _Parser(
        prog="collbench",
        description="Cluster-wide benchmarks of collective communication (NCCL on GPUs, gloo on CPUs) on Ray.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module in (run_cmd, plan_cmd, report_cmd, compare_cmd, predict_cmd, lab_cmd):
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
    except SpecError as e:
        print(f"collbench: error: {e}", file=sys.stderr)
        return 2
