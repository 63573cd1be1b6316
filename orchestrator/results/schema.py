"""The one Parquet schema of result rows and of the per-run manifest.

Writer, reader, report and tests all import these declarations. Bump SCHEMA_VERSION when a
column changes meaning or type; readers refuse versions they do not know.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

import pyarrow as pa

SCHEMA_VERSION = 2

_str_list = pa.list_(pa.string())

ROW_SCHEMA = pa.schema(
    [
        ("schema_version", pa.int32()),
        ("run_id", pa.string()),
        ("started_at", pa.timestamp("us", tz="UTC")),
        # what was measured
        ("collective", pa.string()),
        ("backend", pa.string()),
        ("dtype", pa.string()),
        ("op", pa.string()),  # "none" for collectives that do not reduce
        ("in_place", pa.bool_()),
        ("msg_bytes", pa.int64()),  # nccl-tests' S for this collective, after rounding
        ("count", pa.int64()),  # elements in msg_bytes
        # where it ran
        ("world_size", pa.int32()),
        ("n_nodes", pa.int32()),
        ("ranks_per_node", pa.int32()),  # largest number of the group's ranks on one node
        ("topology", pa.string()),  # intra | inter | mixed | intra-domain (NVLink domain facts only), where the ranks ran
        ("pattern", pa.string()),
        ("phase", pa.string()),  # collbench qualify: intra, pairs, retest, gate, bisect (null in a sweep)
        ("group_id", pa.string()),
        ("round", pa.int32()),
        ("groups_in_round", pa.int32()),
        ("ranks", pa.list_(pa.int32())),  # global ranks, by group rank
        ("local_ranks", pa.list_(pa.int32())),  # each rank's index on its node (its GPU's rail), by group rank
        ("hosts", _str_list),  # by group rank
        ("node_ips", _str_list),
        ("node_ids", _str_list),
        # per rank, its node's name in the scheduler (Slurm's, Kubernetes'); null outside one
        ("scheduler_nodes", _str_list),
        ("devices", _str_list),
        ("pids", pa.list_(pa.int64())),  # worker process ids, by group rank
        ("pair_nodes", _str_list),  # pairwise only: the two node ids
        # what the backend really used (null where unknown; docs/concepts/transport.md)
        ("gpu_model", pa.string()),  # null on CPU ranks
        ("platform", pa.string()),  # the platform tags its nodes share, joined by + (docs/guides/expected.md)
        ("nccl_version", pa.string()),  # of the library loaded by the workers, from NCCL's own log
        ("net_transport", pa.string()),  # inter-node path: IB, Socket/eth0, AWS Libfabric/GDRDMA, gloo/tcp/eth0
        ("intra_transport", pa.string()),  # intra-node paths NCCL connected: P2P, SHM, NVLS, NET (joined by +)
        # how it was measured
        ("iters", pa.int32()),
        ("warmup", pa.int32()),
        ("check_iters", pa.int32()),
        # the group's communicator, as nccl-tests' comm_ops_perf times it: seconds spent forming it
        # once every rank was there (init_process_group of the rank that arrived last: NCCL's
        # communicator, eagerly; gloo's connections) and destroying it after its last size (the
        # slowest rank's; null where it never formed, or failed before leaving)
        ("comm_init_s", pa.float64()),
        ("comm_destroy_s", pa.float64()),
        # results
        ("time_us", pa.float64()),  # mean over iterations of the slowest rank's time
        ("time_us_p50", pa.float64()),
        ("time_us_p99", pa.float64()),
        ("time_us_min", pa.float64()),
        ("time_us_max", pa.float64()),
        ("time_cv", pa.float64()),
        ("algbw_gbps", pa.float64()),  # msg_bytes / time_us, GB = 1e9 bytes (all_to_allv: traffic_busiest_bytes)
        ("busbw_gbps", pa.float64()),  # algbw_gbps * the collective's factor for world_size
        ("time_us_batch", pa.float64()),  # nccl-tests' way: the timed iterations as one batch, mean over ranks
        ("busbw_gbps_batch", pa.float64()),
        ("n_wrong", pa.int64()),  # mismatched elements summed over ranks
        # c10d's own cost of one call on this backend (the largest of the group's ranks': a one-rank
        # in-place all_reduce, which moves nothing), and whether time_us is within DISPATCH_BOUND
        # (judging/defaults.py) of it: such a row times torch's dispatch, not the fabric
        ("dispatch_floor_us", pa.float64()),
        ("dispatch_bound", pa.bool_()),
        # GPU only: the most torch allocated on any rank for this size (buffers, check scratch), and
        # the memory check's estimate of it (docs/concepts/reliability.md)
        ("mem_peak_bytes", pa.int64()),
        ("mem_estimate_bytes", pa.int64()),
        ("status", pa.string()),  # ok | failed | timeout | skipped
        ("error", pa.string()),
        ("failed_ranks", pa.list_(pa.int32())),  # group ranks that failed or never answered
        # overlap workload only: T_step = T_comp + T_comm - T_overlap (each a mean of per-iteration maxima)
        ("t_comp_us", pa.float64()),
        ("t_comm_us", pa.float64()),
        ("t_step_us", pa.float64()),
        ("t_overlap_us", pa.float64()),
        ("overlap_efficiency", pa.float64()),  # t_overlap_us / min(t_comp_us, t_comm_us)
        ("compute_flops", pa.float64()),
        # replay only (pattern "replay"): the traced step (replayed again: numbered on), the op's
        # sequence number in its process group, that group (name:description), the job's own time of it
        ("step", pa.int32()),
        ("seq", pa.int32()),
        ("process_group", pa.string()),
        ("trace_time_us", pa.float64()),
        # all_to_allv only (docs/guides/traffic.md): the matrix's source (a file, moe:..., nccl-tests:spread=S)
        # and digest (workloads.traffic), its bytes at this size in all and of the busiest rank (the
        # larger of what it sends and receives: algbw's bytes), that rank, and the heaviest pair
        ("traffic_source", pa.string()),
        ("traffic_digest", pa.string()),
        ("traffic_total_bytes", pa.int64()),
        ("traffic_busiest_bytes", pa.int64()),
        ("traffic_busiest_rank", pa.int32()),  # group rank
        ("traffic_rank_bytes", pa.list_(pa.int64())),  # each group rank's: the larger of sent and received
        ("traffic_heaviest_pair", pa.list_(pa.int32())),  # (sender, receiver) group ranks
        ("traffic_heaviest_bytes", pa.int64()),
        # how contended the ranks' hosts were while this size was measured (workloads.contention; null
        # where the platform does not say, and in replays): the ranks' process CPU time / wall time (mean
        # over ranks), their threads' run-queue wait / wall time, the node's 1-minute load average / its
        # CPUs, and the hypervisor's steal / all CPU time (each the most of any rank's)
        ("cpu_busy_frac", pa.float64()),
        ("cpu_wait_frac", pa.float64()),
        ("load_per_cpu", pa.float64()),
        ("steal_frac", pa.float64()),
        ("iter_time_us", pa.list_(pa.float64())),  # slowest rank per iteration
        ("rank_time_us", pa.list_(pa.float64())),  # each rank's mean, by group rank
        # the build NCCL ran with, from its log (null where it did not say; docs/concepts/transport.md)
        ("nccl_git_hash", pa.string()),  # NCCL 2.29+: `NCCL git version <branch> <hash>`
        ("nccl_net_plugin", pa.string()),  # loaded (not always used), "Libfabric (v11) aws-ofi-nccl 1.18.0", "internal"
        ("nccl_tuner_plugin", pa.string()),  # "nccl_ofi_tuner (v3)", "internal"
        ("nccl_profiler_plugin", pa.string()),
        ("nccl_cta_policy", pa.string()),  # as NCCL_CTA_POLICY set it: DEFAULT, EFFICIENCY, ZERO
        ("nccl_buffers_registered", pa.string()),  # kinds of user buffers registered: COLLNET, IPC, NET, NVLS (+)
        # the NCCL Inspector's own (kernel-timed) account where --env loads the plugin, null where it is not
        # (docs/concepts/transport.md; workloads.inspector): medians over its records of this collective and size in
        # the group, every rank's pooled, and how many records (0: loaded, but none of this size)
        ("inspector_busbw_gbps", pa.float64()),
        ("inspector_time_us", pa.float64()),
        ("inspector_ops", pa.int64()),
    ]
)

class RunState(str, Enum):
    """How a run stands: the manifest's `state` (its values are the strings stored, so a manifest
    reads the same), and how a sweep, a replay or a qualification ended (RunResult, Qualification)."""

    RUNNING = "running"  # the manifest's first word, until one of the others
    FINISHED = "finished"
    INTERRUPTED = "interrupted"  # Ctrl-C, SIGTERM or a full disk: resumable
    FAILED = "failed"  # an error nothing else handled, or a run that never started

    def __str__(self) -> str:  # the word, under every Python (3.11 changed str() of mixed-in enums)
        return self.value


MANIFEST_SCHEMA = pa.schema(
    [
        ("schema_version", pa.int32()),
        ("run_id", pa.string()),
        ("started_at", pa.timestamp("us", tz="UTC")),
        ("finished_at", pa.timestamp("us", tz="UTC")),
        ("state", pa.string()),  # a RunState's value
        # where the run's driver was killed without marking its manifest: who held it, and what found
        # it so and marked it interrupted (results/left_behind.settle); null where its driver said
        ("ended_by", pa.string()),
        ("command", pa.string()),  # run | qualify | watch | replay | import
        ("job_submission_id", pa.string()),  # under `ray job submit`: the job's submission id
        # JSON: the scheduler's job the driver ran in (Slurm: job_id, job_name, partition, cluster,
        # nodelist, nodes; Kubernetes: namespace, pod), orchestrator.scheduler.job; null outside one
        ("scheduler", pa.string()),
        # JSON: the switch tree a qualification judged pairs by (sweep.topology: source, switches'
        # nodes and child switches) and `leaves`, each node IP's leaf; null without one
        ("switches", pa.string()),
        ("collbench_version", pa.string()),
        ("torch_version", pa.string()),
        ("ray_version", pa.string()),
        ("nccl_version", pa.string()),  # loaded by the workers (NCCL's log), else the one torch was built with
        ("gpu_driver", pa.string()),  # NVIDIA driver versions of the GPU nodes
        ("batch_floor_us", pa.float64()),  # the batch loop dispatching nothing, per call: the largest of any worker
        ("dispatch_floor_us", pa.float64()),  # c10d's own cost of one call (rows' column): the largest of any worker
        ("worker_niceness", pa.int32()),  # the ranks' nice value, the highest (Ray's default 15: any process comes first)
        ("python_version", pa.string()),
        ("backend", pa.string()),
        ("hostnames", _str_list),
        ("device_models", _str_list),
        ("comm_env", pa.string()),  # JSON: NCCL_*/GLOO_*/... seen by the workers
        ("command_line", pa.string()),
        ("spec", pa.string()),  # JSON of the validated SweepSpec
        ("inventory", pa.string()),  # JSON of the nodes used
        ("platforms", pa.string()),  # JSON: node IP -> platform key
        ("expected", pa.string()),  # JSON: expected-value entries the cluster declared (a lab's link rate)
        ("groups_total", pa.int32()),
        ("groups_done", pa.int32()),
        # where the start went (execution.session.StartupTimes), seconds
        ("startup_connect_s", pa.float64()),
        ("startup_probe_s", pa.float64()),
        ("startup_workers_s", pa.float64()),
        ("startup_first_join_s", pa.float64()),
        ("startup_doctor_s", pa.float64()),
        ("doctor", pa.string()),  # JSON: node IP -> the facts the quick doctor read there (doctor.facts)
        # collbench import: JSON list, one object per test read: path, format, group_id, binary,
        # nccl_tests_version, command_line, start_time, avg_busbw_gbps (null where the file does not say)
        ("sources", pa.string()),
        # the build NCCL ran with, as the rows have it (the run's distinct values joined by ",")
        ("nccl_git_hash", pa.string()),
        ("nccl_net_plugin", pa.string()),
        ("nccl_tuner_plugin", pa.string()),
        ("nccl_profiler_plugin", pa.string()),
        ("nccl_cta_policy", pa.string()),
    ]
)


# The manifest's fields that hold JSON: in memory (and in the Parquet manifest of schema_version
# 1) a JSON string each; in the manifest file a JSON value nested as it is, so `jq .spec.iters` and
# json.load read it without a second decode (store.write_manifest, dataset.manifest).
MANIFEST_JSON_FIELDS = ("comm_env", "spec", "inventory", "platforms", "expected", "doctor", "sources", "scheduler",
                        "switches")

ROW_COLUMNS: frozenset[str] = frozenset(ROW_SCHEMA.names)


def check_columns(keys: Iterable[str]) -> None:
    """Refuse a key that is not a column: written, it would vanish without a trace."""
    unknown = sorted(set(keys) - ROW_COLUMNS)
    if unknown:
        raise KeyError(f"not a result column: {', '.join(unknown)}")


def rows_table(rows: list[dict]) -> pa.Table:
    """Rows (dicts keyed by column name; missing keys become null) as a table of ROW_SCHEMA."""
    check_columns(k for r in rows for k in r)
    full = [{"schema_version": SCHEMA_VERSION, **r} for r in rows]
    return pa.Table.from_pylist(full, schema=ROW_SCHEMA)
