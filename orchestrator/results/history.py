"""What earlier runs in a results dataset say about the next one: the rates a run's estimate is
made from (sweep/estimate.py), learned from the latest finished sweep of the same backend on the
same hosts, else the stated defaults."""

from __future__ import annotations

import json

from orchestrator.errors import UsageError
from orchestrator.results import dataset
from orchestrator.sweep.estimate import DEFAULTS, Rates

LOOK_BACK = 5  # runs read at most, newest first: a folder of thousands stays quick
COLUMNS = ["run_id", "status", "backend", "collective", "topology", "msg_bytes", "time_us", "busbw_gbps", "round", "group_id", "iters",
           "warmup", "check_iters", "load_per_cpu"]


def earlier_rates(output: str, backend: str, node_ips: list[str]) -> Rates:
    """The rates of the latest finished `collbench run` in `output` made with `backend` on exactly
    the nodes at `node_ips`; the backend's defaults where there is none (or `output` holds no rows yet)."""
    fallback = DEFAULTS.get(backend, DEFAULTS["gloo"])
    try:
        known = dataset.runs(output)
    except (UsageError, OSError):
        return fallback
    for run_id in reversed(known[-LOOK_BACK:]):
        try:
            m = dataset.manifest(output, run_id)
        except dataset.CorruptManifest:
            continue
        if not m or m.get("command") != "run" or m.get("state") != "finished" or m.get("backend") != backend \
                or _ips(m.get("inventory")) != sorted(node_ips):
            continue
        learned = Rates.learned(dataset.load(output, run_id, columns=COLUMNS), {**m, "run_id": run_id}, fallback)
        if learned is not None:
            return learned
    return fallback


def _ips(inventory: str | None) -> list[str]:
    """The node IPs of a manifest's inventory (JSON: one object per node), sorted; [] where unreadable."""
    try:
        return sorted(str(n["ip"]) for n in json.loads(inventory or "[]"))
    except (ValueError, TypeError, KeyError):
        return []
