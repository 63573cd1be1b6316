"""What a run records about itself once: versions, hosts, devices, environment, command line."""

from __future__ import annotations

import json
import os
import platform
import sys

import ray

import orchestrator
from orchestrator import scheduler
from orchestrator.results.schema import RunState
from orchestrator.sweep.inventory import Inventory
from orchestrator.sweep.spec import SweepSpec
from workloads.comm_env import COMM_ENV_PREFIXES
from workloads.messages import WorkerInfo


def comm_env(infos: list[WorkerInfo]) -> dict:
    """The communication variables of the driver and the distinct sets the workers saw."""
    driver = {k: v for k, v in sorted(os.environ.items()) if k.startswith(COMM_ENV_PREFIXES)}
    workers = []
    for info in infos:
        env = dict(sorted(info.comm_env.items()))
        if env not in workers:
            workers.append(env)
    return {"driver": driver, "workers": workers}


def manifest(spec: SweepSpec, inv: Inventory, infos: list[WorkerInfo], backend: str, groups_total: int) -> dict:
    torch_versions = sorted({i.torch_version for i in infos})
    nccl = sorted({i.nccl_version for i in infos if i.nccl_version})
    floors = [f for i in infos if (f := i.gpu_batch_floor_us if backend == "nccl" else i.batch_floor_us) is not None]
    dispatch = [f for i in infos if (f := i.dispatch_floor(backend)) is not None]
    return {
        "state": RunState.RUNNING.value,
        "collbench_version": orchestrator.__version__,
        "torch_version": ",".join(torch_versions),
        "ray_version": ray.__version__,
        "nccl_version": ",".join(nccl) or None,
        "python_version": platform.python_version(),
        "backend": backend,
        "hostnames": sorted({i.hostname for i in infos}),
        "device_models": sorted({n.accelerator or i.cpu_model for n, i in _node_infos(inv, infos)}),
        "comm_env": json.dumps(comm_env(infos)),
        "command_line": " ".join(sys.argv),
        "job_submission_id": job_submission_id(),
        "scheduler": json.dumps(found) if (found := scheduler.job(os.environ)) else None,
        "spec": json.dumps(spec.to_json()),
        "inventory": json.dumps(inv.to_json()),
        "groups_total": groups_total,
        "groups_done": 0,
        # a time_us_batch this close measures the loop, not the collective (docs/concepts/bandwidth.md)
        "batch_floor_us": max(floors) if floors else None,
        "dispatch_floor_us": max(dispatch) if dispatch else None,  # rows within DISPATCH_BOUND of it time torch
        "worker_niceness": max((i.niceness for i in infos if i.niceness is not None), default=None),
    }


def job_submission_id() -> str | None:
    """The submission id of the Ray job this driver runs as (`ray job submit` passes the job's
    config, with its metadata, to the entrypoint in RAY_JOB_CONFIG_JSON_ENV_VAR), else None."""
    try:
        config = json.loads(os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR", "{}"))
    except ValueError:
        return None
    metadata = config.get("metadata") if isinstance(config, dict) else None
    return metadata.get("job_submission_id") if isinstance(metadata, dict) else None


def _node_infos(inv: Inventory, infos: list[WorkerInfo]):
    seen: dict[str, WorkerInfo] = {}
    for info in infos:
        seen.setdefault(info.node_id, info)
    for node in inv.nodes:
        if node.node_id in seen:
            yield node, seen[node.node_id]


def platforms(inv: Inventory, found: dict) -> dict:
    """The manifest's `platforms` (node IP -> platform key) and `expected` (the entries the
    cluster declared, as a lab does), as JSON."""
    declared = []
    for p in found.values():
        declared += [e for e in p.declared if e not in declared]
    return {"platforms": json.dumps({n.ip: found[n.node_id].key for n in inv.nodes if n.node_id in found}),
            "expected": json.dumps(declared) if declared else None}
