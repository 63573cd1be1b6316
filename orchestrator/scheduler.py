"""The scheduler a run lives under (Slurm, Kubernetes, or none): which one, from the driver's own
environment; the job it runs in, for the manifest; and for a node that did not pass, the command
an operator runs to take it out of service there (Slurm's drain, Kubernetes' cordon and a label),
which `qualify --drain` runs itself. Pure but for `run`, which starts the one command it is given.

The node is named as the scheduler names it: the verdict's `name` (SLURMD_NODENAME or
COLLBENCH_NODE_NAME on the workers, issue 44), else its host name."""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

RUN_TIMEOUT_S = 30.0  # scontrol and kubectl answer in a second; past this the action is reported failed
LABEL = "collbench.io/verdict"  # the Kubernetes node label a cordon carries


class Scheduler(str, Enum):
    """Who gave this run its nodes: what `--scheduler auto` finds, or what the user names."""

    SLURM = "slurm"  # inside a Slurm job (SLURM_JOB_ID)
    KUBERNETES = "kubernetes"  # inside a pod (KUBERNETES_SERVICE_HOST)
    NONE = "none"  # a Ray cluster someone started: no command to take a node out

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> Scheduler:
        if environ.get("SLURM_JOB_ID"):
            return cls.SLURM
        if environ.get("KUBERNETES_SERVICE_HOST"):
            return cls.KUBERNETES
        return cls.NONE


def chosen(name: str, environ: Mapping[str, str]) -> Scheduler:
    """`--scheduler NAME` (auto: from the environment)."""
    return Scheduler.detect(environ) if name == "auto" else Scheduler(name)


# Slurm's job, as its environment gives it to every step (sbatch(1), "OUTPUT ENVIRONMENT VARIABLES")
_SLURM_JOB = {"job_id": "SLURM_JOB_ID", "job_name": "SLURM_JOB_NAME", "partition": "SLURM_JOB_PARTITION",
              "cluster": "SLURM_CLUSTER_NAME", "nodelist": "SLURM_JOB_NODELIST", "nodes": "SLURM_JOB_NUM_NODES"}


def nodes_to_wait_for(wait_nodes: int | None, environ: Mapping[str, str]) -> tuple[int, str]:
    """How many nodes a run waits for before planning, and why (for its line): --wait-nodes where
    given, else a Slurm job's node count (the driver runs inside the allocation), else 0 (none)."""
    if wait_nodes is not None:
        return wait_nodes, "--wait-nodes"
    raw = environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES") or ""
    return (int(raw), "the Slurm job's nodes, $SLURM_JOB_NUM_NODES") if raw.strip().isdigit() else (0, "")


def not_joined(environ: Mapping[str, str], hosts: set[str], ips: set[str], run=subprocess.run) -> str:
    """What a run that waited in vain says of the nodes that never joined: `; not joined: slm2
    (Slurm)` in a Slurm job (slurm_not_joined), else nothing."""
    missing = slurm_not_joined(environ, hosts, ips, run)
    return f"; not joined: {', '.join(missing)} (Slurm)" if missing else ""


def slurm_nodes(environ: Mapping[str, str], run=subprocess.run) -> dict[str, set[str]]:
    """The Slurm job's nodes (SLURM_JOB_NODELIST), each with its other names: NodeHostName and
    NodeAddr from `scontrol show node` where it answers (none where it does not). Empty outside a
    Slurm job."""
    from orchestrator.sweep.topology import expand_hostlist

    nodelist = environ.get("SLURM_JOB_NODELIST", "")
    if not nodelist:
        return {}
    try:
        said = run(["scontrol", "show", "node", "-o", nodelist], capture_output=True, text=True,
                   timeout=RUN_TIMEOUT_S, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        said = ""  # no scontrol here: the names alone
    known = {}
    for line in said.splitlines():
        fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
        if "NodeName" in fields:
            known[fields["NodeName"]] = {fields.get("NodeHostName", ""), fields.get("NodeAddr", "")} - {""}
    return {name: known.get(name, set()) for name in expand_hostlist(nodelist)}


def slurm_name(host: str, ip: str, environ: Mapping[str, str], run=subprocess.run) -> str | None:
    """The Slurm name of the job's node that is `host` (or its short name) or holds `ip`, from the
    job's node list and `scontrol show node` (a node whose worker died has no SLURMD_NODENAME to
    give, and Slurm refuses its host name where NodeName differs); None where none is."""
    names = {host, host.split(".")[0], ip} - {""}
    return next((name for name, other in slurm_nodes(environ, run).items() if ({name} | other) & names), None)


def slurm_not_joined(environ: Mapping[str, str], hosts: set[str], ips: set[str], run=subprocess.run) -> list[str]:
    """The Slurm names of the job's nodes that no joined Ray node is: none of its names (slurm_nodes)
    among the joined nodes' host names (short too) and IP addresses."""
    seen = hosts | {h.split(".")[0] for h in hosts} | ips
    return [name for name, other in slurm_nodes(environ, run).items() if not ({name} | other) & seen]


def slurm_topology(environ: Mapping[str, str], run=subprocess.run) -> str:
    """`scontrol show topology` inside a Slurm job (the switch tree of slurm.conf's topology/tree
    plugin), or "" where there is none: outside a job, no scontrol, or no tree configured."""
    if not environ.get("SLURM_JOB_ID"):
        return ""
    try:
        done = run(["scontrol", "show", "topology"], capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                   check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout if done.returncode == 0 and "SwitchName=" in done.stdout else ""


KUBERNETES_TOPOLOGY = "kubernetes:"  # --topology kubernetes:LABEL[,LABEL...]: node labels, read with kubectl


def kubernetes_topology(value: str, run=subprocess.run):
    """The switch tree `--topology kubernetes:LEAF_LABEL[,SPINE_LABEL...]` names, from the cluster's
    nodes and this namespace's pods (`kubectl get nodes|pods -o json`: the driver's service account
    needs to list them, as it needs nodes to cordon); UsageError in one line where kubectl fails."""
    from orchestrator.errors import UsageError
    from orchestrator.sweep.topology import from_kubernetes

    labels = [w.strip() for w in value.removeprefix(KUBERNETES_TOPOLOGY).split(",")]
    if not all(labels):
        raise UsageError(f"--topology {value}: name the node label of each level, lowest first "
                         "(kubernetes:LEAF_LABEL[,SPINE_LABEL])")
    nodes, pods = (kubectl_list(kind, f"--topology {value}", run) for kind in ("nodes", "pods"))
    return from_kubernetes(nodes, pods, labels, f"kubectl node labels {','.join(labels)}")


def kubectl_list(kind: str, what: str, run=subprocess.run) -> dict:
    """`kubectl get KIND -o json` (nodes, pods: this namespace's), parsed; UsageError in one line,
    starting with `what`, where kubectl cannot be run, fails or does not answer JSON."""
    import json

    from orchestrator.errors import UsageError

    argv = ["kubectl", "get", kind, "-o", "json"]
    try:
        done = run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        raise UsageError(f"{what}: {shlex.join(argv)}: {e}") from None
    first = next((ln.strip() for ln in (done.stderr or "").splitlines() if ln.strip()), "")
    if done.returncode != 0:
        raise UsageError(f"{what}: {shlex.join(argv)}: exit {done.returncode}: {first}")
    try:
        return json.loads(done.stdout)
    except ValueError:
        raise UsageError(f"{what}: {shlex.join(argv)} did not answer JSON") from None


def aliases(names: tuple[str, ...], environ: Mapping[str, str], run=subprocess.run) -> dict[str, set[str]]:
    """For --nodes and --exclude: each of `names` that is a Slurm node of this job, with its host
    name and address (so `--exclude slm2` finds the Ray node of h-slm2, 10.0.0.12); inside a pod,
    each that is a Kubernetes node, with the IPs of this namespace's pods on it (a Ray node is a
    pod; kubectl that cannot list pods gives none); empty outside both or where no name is given
    (scontrol and kubectl are not asked)."""
    if not names:
        return {}
    if environ.get("SLURM_JOB_NODELIST"):
        return {name: other for name, other in slurm_nodes(environ, run).items() if name in names}
    if Scheduler.detect(environ) is not Scheduler.KUBERNETES:
        return {}
    from orchestrator.errors import UsageError
    from orchestrator.sweep.topology import pods_on

    try:
        on = pods_on(kubectl_list("pods", "--nodes", run))
    except UsageError:
        return {}
    return {name: set(on[name]) for name in names if on.get(name)}


def job(environ: Mapping[str, str]) -> dict | None:
    """The job the driver runs in, for the manifest's `scheduler` field: Slurm's id, name,
    partition, cluster and node list; under Kubernetes the pod's namespace and name where the
    downward API gives them; None outside both."""
    found = Scheduler.detect(environ)
    if found is Scheduler.SLURM:
        return {"scheduler": found.value, **{k: environ[v] for k, v in _SLURM_JOB.items() if environ.get(v)}}
    if found is Scheduler.KUBERNETES:
        pod = {"namespace": environ.get("POD_NAMESPACE"), "pod": environ.get("POD_NAME") or environ.get("HOSTNAME")}
        return {"scheduler": found.value, **{k: v for k, v in pod.items() if v}}
    return None


@dataclass(frozen=True)
class Action:
    """What takes one node out of service: its commands (argv each), as an operator would type them."""

    scheduler: Scheduler
    node: str  # the scheduler's name of the node
    commands: tuple[tuple[str, ...], ...]

    def shown(self) -> list[str]:
        return [shlex.join(argv) for argv in self.commands]

    def to_json(self) -> dict:
        return {"scheduler": self.scheduler.value, "node": self.node, "commands": self.shown()}


def reason(verdict: str, detail: str, run_id: str) -> str:
    """The drain's reason as Slurm keeps it (sinfo -R shows it): what, why, which run; one line."""
    why = " ".join(detail.split())
    why = why if len(why) <= 80 else why[:77] + "..."
    return f"collbench: {verdict}, {why}, run {run_id}"


def action(scheduler: Scheduler, node: str, verdict: str, detail: str, run_id: str) -> Action | None:
    """The commands that take `node` out of `scheduler`'s service (None: no scheduler)."""
    if scheduler is Scheduler.SLURM:
        return Action(scheduler, node, (("scontrol", "update", f"NodeName={node}", "State=DRAIN",
                                         f"Reason={reason(verdict, detail, run_id)}"),))
    if scheduler is Scheduler.KUBERNETES:
        return Action(scheduler, node, (("kubectl", "cordon", node),
                                        ("kubectl", "label", "node", node, f"{LABEL}={verdict}", "--overwrite")))
    return None


@dataclass(frozen=True)
class Done:
    """How running an action went: ok, or the first command that failed and what it said."""

    action: Action
    ok: bool
    said: str  # the failing command's first line of output (its stderr, else stdout), or ""

    def line(self) -> str:
        if self.ok:
            return f"collbench: drained {self.action.node} ({self.action.scheduler.value}): " + \
                "; ".join(self.action.shown())
        return (f"collbench: could not drain {self.action.node} ({self.action.scheduler.value}): {self.said}; "
                f"{_WHO[self.action.scheduler]} can run: " + "; ".join(self.action.shown()))


_WHO = {Scheduler.SLURM: "an administrator (SlurmUser or root)",
        Scheduler.KUBERNETES: "a user allowed to patch nodes", Scheduler.NONE: "an operator"}


def run(act: Action, timeout_s: float = RUN_TIMEOUT_S) -> Done:
    """Run the action's commands in order, stopping at the first that fails (not found, refused
    for want of privilege, timed out): what it said is kept."""
    for argv in act.commands:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
        except FileNotFoundError:
            return Done(act, False, f"{argv[0]}: not found on this machine's PATH")
        except OSError as e:  # not executable, and the like
            return Done(act, False, f"{argv[0]}: cannot start it ({e.strerror or e})")
        except subprocess.TimeoutExpired:
            return Done(act, False, f"{shlex.join(argv)}: no answer in {timeout_s:.0f} s")
        if done.returncode != 0:
            first = next((ln.strip() for ln in (done.stderr or done.stdout or "").splitlines() if ln.strip()), "")
            return Done(act, False, f"{shlex.join(argv)}: exit {done.returncode}" + (f": {first}" if first else ""))
    return Done(act, True, "")


def head_address(peer: str | None) -> str:
    """The address a Slurm job's head node advertises to the others: the one its kernel sends from
    toward `peer` (another node of the job, as Slurm addresses it), so never a loopback address
    whatever /etc/hosts maps the host name to (Debian's 127.0.1.1), nor a management interface that
    does not reach the others. No peer (a one-node job): the default route's, else loopback."""
    import socket

    from orchestrator.errors import UsageError

    def source(target: str) -> tuple[str, str]:
        ip = socket.getaddrinfo(target, None, socket.AF_INET)[0][4][0]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((ip, 9))  # no packet is sent: the kernel picks the route and its source address
            return ip, s.getsockname()[0]

    if not peer:
        try:
            return source("192.0.2.1")[1]  # TEST-NET-1: only the default route's choice of source
        except OSError:
            return "127.0.0.1"
    try:
        ip, mine = source(peer)
    except OSError as e:
        raise UsageError(f"head address: no route from this node to {peer} ({e.strerror or e})") from None
    if mine.startswith("127.") and not ip.startswith("127."):
        raise UsageError(f"head address: this node reaches {peer} ({ip}) only from {mine}, a loopback address")
    return mine


if __name__ == "__main__":  # the Slurm scripts: python -m orchestrator.scheduler head-address [PEER]
    import sys

    from orchestrator.errors import UsageError

    if sys.argv[1:2] != ["head-address"] or len(sys.argv) > 3:
        sys.exit("usage: python -m orchestrator.scheduler head-address [PEER]")
    try:
        print(head_address(sys.argv[2] if len(sys.argv) > 2 else None))
    except UsageError as e:
        print(f"collbench: {e}", file=sys.stderr)
        sys.exit(2)
