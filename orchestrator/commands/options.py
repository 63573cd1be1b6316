"""Options shared by several subcommands: the sweep options (one per SweepSpec field, also the
keys of a --config YAML file) and the output options of report, compare and predict."""

from __future__ import annotations

import argparse

from orchestrator.operations.checks import MIN_FRACTION, UNITS
from orchestrator.operations.sweeps import (
    SweepSpec,
    field_of,
    from_command_line,
    key_of,
    read_config,
    shown,
    spec_fields,
)

FORMATS = ("table", "markdown", "csv", "json")


def add_spec_options(p: argparse.ArgumentParser, only: tuple[str, ...] | None = None,
                     defaults: dict | None = None, helps: dict[str, str] | None = None,
                     names: dict[str, tuple[str, ...]] | None = None) -> None:
    """One option per SweepSpec field (or per field in `only`), from the field's own flags and
    help; `defaults` are the command's own (shown in the help, applied by spec_from_args), and
    `helps` and `names` the command's own help and flags of a field it accepts less of (qualify:
    one collective, `--collective`, the field's own flags still taken)."""
    g = p.add_argument_group("sweep options (also accepted as keys of a --config YAML file)")
    p.set_defaults(spec_defaults=defaults or {}, spec_only=only, spec_command=p.prog)
    for f in spec_fields():
        if only is not None and f.name not in only:
            continue
        flags, kind = (*(names or {}).get(f.name, ()), *f.metadata["flags"]), f.metadata["kind"]
        default = f.default if not callable(f.default_factory) else f.default_factory()  # type: ignore[misc]
        default = (defaults or {}).get(f.name, default)
        help_text = (helps or {}).get(f.name, f.metadata["help"])
        if "(default" not in help_text:  # a help that says its own default (--address) keeps it alone
            help_text += f" (default: {shown(f, default) or 'none'})"
        if kind == "bool":
            g.add_argument(*flags, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif kind == "env":
            g.add_argument(*flags, dest=f.name, action="append", default=None, metavar="NAME=VALUE", help=help_text)
        else:
            metavar = (names[f.name][0].lstrip("-") if names and f.name in names else key_of(f)).upper()
            g.add_argument(*flags, dest=f.name, default=None, metavar=metavar, help=help_text)
    p.add_argument("--config", metavar="YAML",
                   help="sweep file: its keys are the long names of the sweep options (listed below) with underscores "
                   "(min_bytes: 1K for --min-bytes 1K, group_timeout: 5m); a key of an option this command does not "
                   "take is refused; options on the command line win")


def spec_from_args(args: argparse.Namespace) -> SweepSpec:
    """The command's sweep from its parsed options (operations.sweeps.from_command_line)."""
    return from_command_line({f.name: getattr(args, f.name, None) for f in spec_fields()}, args.config,
                             getattr(args, "spec_defaults", {}), getattr(args, "spec_only", None),
                             getattr(args, "spec_command", None))


def given_fields(args: argparse.Namespace) -> frozenset[str]:
    """The sweep options the user gave: on the command line (parsed as None when absent) or as keys
    of --config (the file already read and checked by spec_from_args)."""
    on_line = {f.name for f in spec_fields() if getattr(args, f.name, None) is not None}
    return frozenset(on_line | {field_of(key).name for key in (read_config(args.config) if args.config else {})})


def add_format(p: argparse.ArgumentParser, extra: tuple[str, ...] = (), help_extra: str = "") -> None:
    p.add_argument("--format", choices=(*FORMATS, *extra), default="table",
                   help=f"output format (default: table){help_extra}")


def add_analysis_options(p: argparse.ArgumentParser, threshold: float, formats: tuple[str, ...] = (),
                         formats_help: str = "") -> None:
    """--threshold, --unit and --format, for report and compare (`formats`: the command's own)."""
    p.add_argument("--threshold", type=float, default=threshold,
                   help=f"flag values this fraction worse than the reference (default: {threshold:g})")
    p.add_argument("--unit", choices=list(UNITS), default="GBps",
                   help="bandwidth unit: GBps (1e9 bytes/s, as nccl-tests; default) or Gbps (1e9 bits/s, link speeds)")
    add_format(p, formats, formats_help)


def add_expected_options(p: argparse.ArgumentParser, what: str) -> None:
    """--expected and --min-fraction, for report and qualify."""
    p.add_argument("--expected", metavar="FILE",
                   help="YAML entries of expected busbw (collective, topology, min_bytes, busbw_gbps, optional "
                   "platform, source) that add to and override the shipped table (docs/guides/expected.md)")
    p.add_argument("--min-fraction", type=float, default=MIN_FRACTION,
                   help=f"{what} below this fraction of the expected value (default: {MIN_FRACTION:g})")


def add_doctor_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-doctor", action="store_true",
                   help="skip the quick checks (collbench doctor's: the same software everywhere, every node "
                   "reachable on ephemeral ports, the same MTU, /dev/shm, memlock, GPUs in Ray) made in the workers "
                   "before the first group; a failed one refuses the run in one line naming the node")


def add_scheduler_options(p: argparse.ArgumentParser, named: str) -> None:
    """--scheduler and --drain (qualify, watch): the command that takes a node that `named` out of
    service, printed, and run with --drain."""
    from orchestrator.operations.qualify import SCHEDULERS

    p.add_argument("--scheduler", choices=SCHEDULERS, default="auto",
                   help=f"whose command takes a node that {named} out of service, printed for each such node: "
                   "slurm (scontrol update NodeName=N State=DRAIN Reason=...), kubernetes (kubectl cordon N and a "
                   "label collbench.io/verdict), none; auto: slurm inside a Slurm job, kubernetes inside a pod, "
                   "else none (default: auto)")
    p.add_argument("--drain", action="store_true",
                   help=f"run that command for every node that {named} (never another one), one line each; "
                   "one that fails (no privilege, no such node) is said with what the scheduler answered")
