"""A session on Ray, shared by `run` and `qualify`: join the cluster, read what it is, check what
the sweep needs, start one worker per rank, open the store and the manifest, and close it all in
one place (a finished, interrupted or failed session leaves its manifest saying which).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import json
import os
import shutil
import time

import ray

from orchestrator import scheduler
from orchestrator.errors import UsageError
from orchestrator.execution import connect, doctor, probe, provenance, signals
from orchestrator.execution.events import GroupEnded, GroupJoined, RunObserver
from orchestrator.execution.metrics import RunMetrics
from orchestrator.execution.outcome import Tally
from orchestrator.execution.pool import ActorPool, placement_bundles
from orchestrator.execution.rows import RunRef
from orchestrator.execution.runner import Runner
from orchestrator.execution.voice import COMMAND_LINE, Voice
from orchestrator.results.schema import RunState
from orchestrator.results.store import ResultStore
from orchestrator.sweep import inventory
from orchestrator.sweep.devices import FLOAT8, check_driver, check_memory, float8_for_cluster
from orchestrator.sweep.inventory import Inventory
from orchestrator.sweep.sizes import format_bytes
from orchestrator.sweep.spec import ALL, SweepSpec, auto_backend, for_backend

READER_WAIT_S = 1.0  # how long a run waits for its lock where a reader holds it a moment (results/left_behind.py)
QUIET_ERRORS = "RAY_IGNORE_UNHANDLED_ERRORS"  # Ray's switch for its "Unhandled error" lines (ray._private.worker)


class Session:
    """Use as a context manager: the Ray connection and the workers end with the block. In the
    block, in this order: `cluster()`, `check_devices()`, `start()`, then `finish()` or
    `interrupted()`; a step called before the one it needs says which (SessionOrder)."""

    def __init__(self, spec: SweepSpec, run_id: str, started: dt.datetime, placement_group=None,
                 partition: str | None = None, cpus_per_rank: float = 0.0, doctor: bool = True,
                 voice: Voice = COMMAND_LINE) -> None:
        """`placement_group`: a caller's Ray placement group whose bundles hold the ranks (its nodes
        only, one rank per bundle); `partition`: a folder of the output the run's rows go under
        (`watch`: date=YYYY-MM-DD); `cpus_per_rank`: what each CPU rank asks Ray for (0: none, as a
        benchmark that may share nodes; `watch` asks, to take only idle capacity); `doctor`: the
        quick checks (execution.doctor) in the workers before anything is written (--no-doctor);
        `voice`: where the session's own notes go (the run's)."""
        self.spec, self.run_id, self.started = spec, run_id, started
        self.placement_group, self.cpus_per_rank = placement_group, cpus_per_rank
        self.store = ResultStore(spec.output, run_id, partition=partition)
        self.connection: connect.Connection | None = None
        self.pool: ActorPool | None = None
        self.manifest: dict = {}
        self.where = ""  # the cluster, as said to the user; set once connected
        self.inv: Inventory | None = None  # cluster()
        self.backend: str | None = None  # cluster()
        self.caps: dict = {}  # check_devices(): node id -> the probe's device capabilities
        self.platforms: dict = {}  # check_devices(): node id -> platform (tags, key)
        self.startup = StartupTimes()
        self.doctor = doctor
        self.voice = voice
        self.diagnosis = None  # the quick doctor's, once the workers started
        self._checked = False
        self._probe_in_workers = False  # a CPU-only run probes its nodes in its workers, once started
        self._probed = False  # read_nodes() done
        self._float8_from_all = False
        self._signals = None
        self._quiet_before: str | None = None  # QUIET_ERRORS before an interrupt set it ("": unset)

    def __enter__(self) -> Session:
        # one writer per run: a second run or --resume of it is refused here, before Ray (after a
        # second: a report may hold the lock for a moment to see whether its driver is gone, and mark it)
        self.store.acquire(READER_WAIT_S)
        try:
            with self.startup.timing("connect_s"):
                self.connection = connect.connect(self.spec.address, self.spec.verbose)
                self.where = self.connection.where
        except BaseException:
            self.store.release()
            raise
        # SIGTERM as Ctrl-C, SIGUSR1 after the round in flight (execution.signals); set after
        # ray.init, which installs a SIGTERM handler of its own that only logs and dies
        self._signals = signals.install()
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self.pool is not None:
                self.pool.shutdown()
            connect.disconnect(self.connection)
        finally:
            try:
                signals.restore(self._signals)
                if self._quiet_before == "":  # as before the interrupt
                    os.environ.pop(QUIET_ERRORS, None)
                elif self._quiet_before is not None:
                    os.environ[QUIET_ERRORS] = self._quiet_before
            finally:
                self.store.release()

    def cluster(self) -> tuple[Inventory, str]:
        """The nodes that hold ranks and the backend (a resumed run compares them with its own:
        sweep.resume.cluster_change)."""
        if not self.where:
            raise SessionOrder("Session.cluster() runs inside `with Session(...)`")
        if self.placement_group is not None:
            inv = inventory.from_placement_group(ray.nodes(), placement_bundles(self.placement_group))
        else:
            inv = connect.joined_nodes(self.spec, self.voice.say)
        inv = inventory.select(inv, self.spec.nodes, self.spec.exclude,
                               scheduler.aliases(self.spec.nodes + self.spec.exclude, os.environ))
        if not inv.nodes:
            raise UsageError("the Ray cluster has no node that can hold a rank")
        backend = auto_backend(self.spec.backend, inv.use_gpus)
        # float8 that only `-d all` asked for is left out where the GPUs cannot reduce it (not refused)
        self._float8_from_all = ALL in self.spec.dtypes and not FLOAT8 & set(self.spec.dtypes)
        self.spec = for_backend(self.spec, backend)  # `-d all` known now
        self.inv, self.backend = inv, backend
        return inv, backend

    def check_devices(self, group_sizes: set[int]) -> None:
        """What every node is (probe task), and whether the sweep fits and can run there."""
        if self.inv is None or self.backend is None:
            raise SessionOrder("Session.check_devices() needs cluster() first")
        if not self.inv.use_gpus:
            # CPU ranks: no check waits on the probe (host memory comes from Ray's inventory), so it
            # runs in the workers once they have started (start()), in no process of its own
            self._probe_in_workers = True
            check_memory(self.spec, self.backend, self.inv, group_sizes, self.caps)
            self._checked = True
            return
        self.read_nodes()
        check_driver(self.backend, self.inv, self.caps)  # before float8 and memory: their facts need a working torch
        self.spec, note = float8_for_cluster(self.spec, self.backend, self.inv, self.caps, self._float8_from_all)
        if note:
            self.voice.warn(f"collbench: {note}")
        check_memory(self.spec, self.backend, self.inv, group_sizes, self.caps)
        self._checked = True

    def read_nodes(self) -> Inventory:
        """The probe of every node of a GPU cluster, once (a run reads it before planning: the
        NVLink domains it finds shape the domain patterns and the intra-domain topology); the
        inventory, its nodes' domains filled in where any node has one."""
        if self.inv is None:
            raise SessionOrder("Session.read_nodes() needs cluster() first")
        if self.inv.use_gpus and not self._probed:
            with self.startup.timing("probe_s"):
                self._read_probes(probe.submit(self.inv, with_nccl=bool(FLOAT8 & set(self.spec.dtypes))))
        return self.inv

    def _read_probes(self, refs: dict) -> None:
        probes = probe.gather(self.inv, refs)
        self.caps = {node_id: p.caps for node_id, p in probes.items() if p.caps is not None}
        self.platforms = {node_id: p.platform for node_id, p in probes.items()}
        domains = {node_id: p.nvlink_domain for node_id, p in probes.items() if p.nvlink_domain}
        if domains:
            self.inv = inventory.with_domains(self.inv, domains)
        self._probed = True

    def start(self, groups_total: int, observers: list, command: str = "run", skipped: int = 0,
              cases_for=None) -> tuple[Runner, Tally]:
        """Workers on every rank, the store, the manifest (state running), and a runner for the
        groups_total - skipped groups still to measure (a resumed run skips the ones on disk)."""
        if not self._checked:
            raise SessionOrder("Session.start() needs check_devices() first")
        self.pool = ActorPool(self.inv, self.spec.env_vars(), start_timeout_s=min(self.spec.group_timeout_s, 300.0),
                              name=f"collbench-{self.run_id}", placement_group=self.placement_group,
                              cpus_per_rank=self.cpus_per_rank)
        with self.startup.timing("workers_s"):
            self.pool.start()
        first = {n.node_id: self.pool.actor(r) for n, r in zip(self.inv.nodes, self.inv.first_rank())}
        if self._probe_in_workers:  # a CPU-only run: the probe in each node's first worker
            with self.startup.timing("probe_s"):
                self._read_probes(probe.submit_in(self.inv, first, False))
        if self.doctor:  # before anything is written: a run refused here leaves no folder
            with self.startup.timing("doctor_s"):
                self.diagnosis = doctor.diagnose(self.inv, agents=first, quick=True, env=self.spec.env_vars())
            said = doctor.refusal(self.diagnosis)
            if said:
                raise doctor.DoctorRefusal(said, self.diagnosis)
        self.store.create()
        self.manifest = provenance.manifest(self.spec, self.inv, self.pool.infos(), self.backend, groups_total)
        drivers = sorted({c.driver_version for c in self.caps.values() if c.driver_version})
        self.manifest.update(provenance.platforms(self.inv, self.platforms), gpu_driver=",".join(drivers) or None,
                             started_at=self.started, command=command, groups_done=skipped,
                             doctor=json.dumps(self.diagnosis.facts_json()) if self.diagnosis else None)
        self.store.write_manifest(self.manifest)
        if (self.manifest.get("worker_niceness") or 0) > 0:
            self.voice.warn(f"collbench: warning: the ranks run at nice {self.manifest['worker_niceness']} (Ray's default "
                            "for its workers): any other process on a node takes their CPU first, and times read "
                            "the host's load; start Ray with RAY_worker_niceness=0 in its environment (collbench "
                            "does where it starts Ray itself)")
        outcome = Tally()
        # the manifest counts a group before anyone is told of it: a progress line it printed is
        # then never ahead of the manifest an interrupt leaves
        observers = [_GroupsDone(self), self.startup, outcome, *observers,
                     RunMetrics(self.run_id, groups_total - skipped)]
        runner = Runner(self.spec, self.pool, self.store, self.backend, RunRef(self.run_id, self.started),
                        observers, {n: p.tags for n, p in self.platforms.items()}, cases_for=cases_for)
        return runner, outcome

    def finish(self, outcome: Tally) -> None:
        """Release the workers, compact the run's rows, mark the manifest finished."""
        if self.pool is None:
            raise SessionOrder("Session.finish() needs start() first")
        self.pool.shutdown()
        self.store.compact()
        build = {name: ",".join(sorted(seen)) or None for name, seen in outcome.nccl_build.items()}
        build["nccl_version"] = build["nccl_version"] or self.manifest["nccl_version"]  # else torch's
        self.manifest.update(
            state=RunState.FINISHED.value, finished_at=dt.datetime.now(dt.timezone.utc),
            device_models=sorted(set(self.manifest["device_models"]) | outcome.device_names), **build,
            **self.startup.fields(),
        )
        self.store.write_manifest(self.manifest)

    def interrupted(self) -> None:
        """Mark the manifest first: `ray job stop` kills the driver 3 s after its SIGTERM. The groups
        done are counted on disk: an interrupt between a group's file and its count loses neither."""
        with contextlib.suppress(OSError):
            self.manifest["groups_done"] = len(self.store.finished_groups())
        self.manifest.update(state=RunState.INTERRUPTED.value, finished_at=dt.datetime.now(dt.timezone.utc),
                             **self.startup.fields())
        self.store.write_manifest(self.manifest)
        # the groups in flight are left: what their ranks raise as peers die with the job (gloo's
        # "Connection closed by peer", which Ray prints as an unhandled error) is the interrupt's,
        # said once by its line; Ray reads this when it would print one (until the session ends)
        self._quiet_before = os.environ.get(QUIET_ERRORS, "")
        os.environ[QUIET_ERRORS] = "1"

    def failed(self) -> None:
        """After an error nothing else handles (a defect, a lost cluster): the manifest says the
        run failed, where a write still can; the error goes on to the caller."""
        if not self.manifest:
            return
        self.manifest.update(state=RunState.FAILED.value, finished_at=dt.datetime.now(dt.timezone.utc), **self.startup.fields())
        with contextlib.suppress(Exception):
            self.store.write_manifest(self.manifest)

    def stopped_by_full_disk(self, e: OSError) -> str:
        """After a write failed for want of space: mark the manifest interrupted (a failed write
        has freed what it took, which a small manifest usually fits in) and say what is where, in
        one line. The rows already written stay as they are."""
        where = os.fsdecode(e.filename) if e.filename else self.store.run_dir
        if os.path.basename(where).startswith(".") and where.endswith(".tmp"):  # the store's atomic-write temporary
            where = os.path.dirname(where)  # (the store removed it: it held room the manifest needs)
        said = f"no space left on device writing {where} ({format_bytes(_free_bytes(where))} free)"
        if not self.manifest:  # the manifest was never written: the run holds nothing to resume
            return said + "; nothing was measured"
        try:
            self.interrupted()
        except OSError as again:
            if not is_disk_full(again):
                raise
            return (f"{said}; {self.manifest['groups_done']} finished group(s) kept in {self.store.location} "
                    f"(its manifest could not be marked interrupted: no space for it either)")
        return f"{said}; {self.manifest['groups_done']} finished group(s) kept in {self.store.location}"


class SessionOrder(RuntimeError):
    """A Session step called before the step it needs (a programming error, not a user's)."""


class StartupTimes(RunObserver):
    """Where the start of a run goes, in seconds: joining Ray (`connect_s`), the probe task on
    every node (`probe_s`; on CPU-only clusters run in each node's first worker, once started),
    starting one worker per rank (`workers_s`), the quick doctor in them (`doctor_s`), and the first group's
    rendezvous, from its round's start to the group formed (`first_join_s`). The closing line and
    the manifest carry them."""

    PARTS = ("connect_s", "probe_s", "workers_s", "doctor_s", "first_join_s")

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def timing(self, part: str):
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.seconds[part] = time.monotonic() - t0

    def group_joined(self, event: GroupJoined) -> None:
        self.seconds.setdefault("first_join_s", event.setup_s)

    def fields(self) -> dict[str, float]:
        return {f"startup_{k}": round(v, 3) for k, v in self.seconds.items()}

    def line(self) -> str:
        parts = [f"{k.removesuffix('_s').replace('_', ' ')} {self.seconds[k]:.1f}s" for k in self.PARTS
                 if k in self.seconds]
        return f"start {sum(self.seconds.values()):.1f}s (" + ", ".join(parts) + ")"


class _GroupsDone(RunObserver):
    """Counts finished groups in the manifest as each ends, so that an interrupted or killed run
    says how far it got. One small atomic write beside the group's own file: counting at round
    ends would cost less but say 0 until the end where a round holds every group (--concurrent)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def group_ended(self, event: GroupEnded) -> None:
        self.session.manifest["groups_done"] += 1
        self.session.store.write_manifest(self.session.manifest)


def is_disk_full(e: BaseException) -> bool:
    """A write that failed for want of space (or of quota); pyarrow's errors carry the errno too."""
    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)


def _free_bytes(path: str) -> int:
    while path and not os.path.isdir(path):
        path = os.path.dirname(path)
    try:
        return shutil.disk_usage(path or ".").free
    except OSError:
        return 0


def say_late_interrupt(session: Session | None, unit: str, voice: Voice) -> None:
    """Say what an interrupt outside the measuring loop left: nothing yet, or a finished run (an
    interrupted one has been said where it was caught)."""
    state = session.manifest.get("state") if session is not None else None
    if state == RunState.FINISHED:
        voice.warn(f"\ncollbench: interrupted while releasing the workers; the run had finished and its rows are "
                   f"saved in {session.store.location}")
    elif state != RunState.INTERRUPTED:
        voice.warn(f"\ncollbench: interrupted before any {unit} was measured")
