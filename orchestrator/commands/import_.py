"""`collbench import PATH... --output DIR`: nccl-tests output files as a collbench run, which
report, compare and predict read as any other. Exit 0 once written, 2 for a bad file or option
(one line naming it; nothing written), 1 when writing fails part-way (nothing of the run kept).
Never touches Ray or torch.
"""

from __future__ import annotations

import argparse

from orchestrator.operations.import_ import TOPOLOGIES, ImportOptions, import_run


def add_parser(sub) -> None:
    p = sub.add_parser(
        "import",
        help="read nccl-tests output files into a results dataset as a run",
        description="Read nccl-tests output (the text tables of nccl-tests 2.13 on, or the -J JSON of 2.19) into "
        "collbench rows, one per size and placement (out-of-place, in-place), written as a run of --output with a "
        "manifest (command import; the files, nccl-tests' version and command line under 'sources'). Each test of "
        "a file is one group: its ranks and hosts from the '#  Rank' lines, its topology from the hosts. "
        "Then `collbench report`, `compare` (--by shape against a collbench run) and `predict` read it. "
        "Exit 0 once written, 2 for a bad file or option (nothing written), 1 when writing fails part-way "
        "(nothing of the run kept).",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="nccl-tests output files (text or -J JSON)")
    p.add_argument("--output", required=True, metavar="DIR",
                   help="results dataset to write the run to (a folder, or an s3://, gs:// URI, as run's --output)")
    p.add_argument("--hosts", metavar="H1,H2,...",
                   help="where the ranks ran, instead of the files' '#  Rank' lines: one host per rank, or one per "
                   "node with the ranks in equal consecutive blocks (as mpirun -N places them); needed for a file "
                   "without '#  Rank' lines")
    p.add_argument("--topology", choices=TOPOLOGIES,
                   help="what the ranks' placement must be (intra: one node, inter: one rank per node, mixed): "
                   "checked against the hosts, a contradiction refused (default: read from the hosts)")
    p.add_argument("--run-id", metavar="ID", help="the run's id (default: a new one, as a sweep's: time and random)")
    p.add_argument("--collective", metavar="NAME",
                   help="the collective of a file that does not name its binary (nccl-tests before June 2025 "
                   "printed no '# Collective test starting' line): all_reduce, all_gather, ... or nccl-tests' "
                   "all_reduce_perf, alltoall_perf, ...; one that contradicts the file is refused (default: the "
                   "file's)")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    hosts = tuple(h.strip() for h in args.hosts.split(",")) if args.hosts is not None else ()
    done = import_run(ImportOptions(paths=tuple(args.paths), output=args.output, hosts=hosts,
                                    topology=args.topology, run_id=args.run_id, collective=args.collective))
    print(f"collbench: imported {done.rows} row(s) in {done.groups} group(s) from {len(args.paths)} file(s) as run "
          f"{done.run_id} in {done.location}")
    return 0
