"""What `collbench run --resume RUN_ID` relies on: what a run id may be, the run's own sweep and cluster from its
manifest, what today's options may change of it, and the command that resumes a run.

Pure (no Ray): the checks run before Ray starts, and before anything is written.

A group is known on disk by its id (`r<round>-g<index>`), which the planner derives from the
sweep and from the cluster's shape: how many nodes, in rank order, with how many ranks each. A
resumed run plans again from its own sweep, so its groups are the run's groups exactly when the
shape and the places are the same: the same hosts (by IP, in rank order) with the same rank
counts. Ray's node ids are not compared: they are new on every start of a node (an embedded
instance gets a new one each run). A one-node run is the same cluster on any one node of its
rank count: an embedded run resumed on the same machine after a new DHCP lease, or in a fresh
container, measures the same groups.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
from collections import Counter
from dataclasses import dataclass

from orchestrator.errors import UsageError
from orchestrator.sweep.inventory import Inventory
from orchestrator.sweep.sizes import format_bytes
from orchestrator.sweep.spec import SweepSpec, for_backend, from_fields, spec_fields

# A run id names a folder under --output and a manifest file (`_runs/<id>.json`, a hidden
# `.<id>.compacting` while it compacts): a name, never a path. It starts with a letter or digit,
# because readers skip names starting with `.` or `_`; 128 characters leave room under the
# usual 255-byte file-name limit for every name derived from it.
RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

# What a resume may change: where rows go, which cluster to join, the exit policy, and the
# deadlines (when a hung group is given up on; a longer one is what --retry-failed of timed-out
# groups needs). None of these changes what a group measures, so old and new rows stay comparable.
MAY_CHANGE = frozenset({"output", "address", "verbose", "allow_failures", "group_timeout_s", "deadline_rate_gbps"})


def check_run_id(run_id: str, flag: str = "--resume") -> None:
    """Refuse a run id that is not a plain name (a path, empty, hidden, control characters)."""
    if not RUN_ID_RE.fullmatch(run_id):
        raise UsageError(
            f"{flag} {run_id!r}: not a run id (a name of letters, digits, '.', '_' and '-', starting with a letter "
            "or digit, at most 128 characters, such as 20261130T190651Z-d5f5a3)"
        )


@dataclass(frozen=True)
class SavedRun:
    """What a run's manifest says it was: its sweep, its nodes in rank order, its backend."""

    spec: SweepSpec
    nodes: tuple[tuple[str, int], ...]  # (ip, ranks) per node, in rank order
    backend: str | None


def saved_run(record: dict, run_id: str) -> SavedRun:
    """The run from its manifest record (dataset.manifest)."""
    source = f"--resume {run_id}"
    missing = [k for k in ("spec", "inventory") if not record.get(k)]
    if missing:  # a run killed before its manifest was complete, or a manifest written by hand
        raise UsageError(f"{source}: its manifest has no {' and no '.join(missing)} (what the run measures and where), "
                         "so it cannot be resumed; start a new run")
    try:
        spec_values = json.loads(record["spec"])
        nodes = tuple((str(n["ip"]), int(n["ranks"])) for n in json.loads(record["inventory"]))
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError(f"{source}: its manifest cannot be read ({type(e).__name__}: {e}); start a new run") from None
    if not isinstance(spec_values, dict):
        raise UsageError(f"{source}: its manifest's spec is not a mapping; start a new run")
    return SavedRun(SweepSpec(**from_fields(spec_values, source=source)), nodes, record.get("backend"))


def resumed_spec(saved: SavedRun, today: SweepSpec, given: set[str], run_id: str) -> SweepSpec:
    """The run's own sweep, with what today's options may change (MAY_CHANGE); an option that
    would change what is measured and differs from the run's own is refused, naming each."""
    compared = today
    if saved.backend:  # `-d all` today against the run's expanded list
        try:
            compared = for_backend(today, saved.backend)
        except UsageError:
            pass
    fields = {f.name: f for f in spec_fields()}
    differ = [name for name in sorted(given - MAY_CHANGE, key=list(fields).index)
              if getattr(compared, name) != getattr(saved.spec, name)]
    if differ:
        said = ", ".join(f"{_flag(fields[n])} {_shown(fields[n], getattr(today, n))} (the run's: "
                         f"{_shown(fields[n], getattr(saved.spec, n))})" for n in differ)
        raise UsageError(f"--resume {run_id}: {said}: a resumed run measures its own sweep; drop "
                         f"{'this option' if len(differ) == 1 else 'these options'}, or start a new run")
    kept = {name: getattr(today, name) for name in MAY_CHANGE & given}
    return dataclasses.replace(saved.spec, **{**kept, "output": today.output, "address": today.address,
                                              "verbose": today.verbose, "allow_failures": today.allow_failures})


def cluster_change(saved: tuple[tuple[str, int], ...], inv: Inventory) -> str | None:
    """Why the cluster is not the run's (its groups would differ), or None when it is."""
    now = tuple((n.ip, n.ranks) for n in inv.nodes)
    if len(saved) == 1 and len(now) == 1:  # the same one-node shape is the same cluster
        return None if saved[0][1] == now[0][1] else \
            f"its node held {saved[0][1]} rank(s), this cluster's node holds {now[0][1]}"
    if saved == now:
        return None
    gone, new = Counter(saved) - Counter(now), Counter(now) - Counter(saved)
    if not gone and not new:
        return "the same nodes come in another rank order"
    parts = []
    for what, nodes in (("gone", gone), ("new", new)):
        if nodes:
            listed = sorted(nodes.elements())
            shown = ", ".join(f"{ip} ({ranks} rank(s))" for ip, ranks in listed[:4])
            parts.append(f"{what}: {shown}" + (f" and {len(listed) - 4} more" if len(listed) > 4 else ""))
    return f"{len(saved)} node(s) then, {len(now)} now; " + "; ".join(parts)


def resume_command(run_id: str, output: str, address: str | None, environ: dict[str, str] | None = None) -> str:
    """The command that finishes the run: its --output and, for a run on a named cluster, its
    --address (given, or $RAY_ADDRESS), so that it joins the same cluster; inside a Slurm job none
    (issue 44): the next job's Ray cluster has another head, which that job's $RAY_ADDRESS names."""
    environ = os.environ if environ is None else environ
    address = address or environ.get("RAY_ADDRESS")
    words = ["collbench", "run", "--resume", run_id, "--output", output]
    if address and not environ.get("SLURM_JOB_ID"):
        words += ["--address", address]
    return shlex.join(words)


def _flag(f) -> str:
    return f.metadata["flags"][-1]


def _shown(f, value) -> str:
    if f.metadata["kind"] == "bytes":
        return format_bytes(value)
    if isinstance(value, tuple):
        return ",".join(map(str, value)) or "''"
    return str(value)
