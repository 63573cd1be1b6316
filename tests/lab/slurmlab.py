"""A real Slurm cluster on the multi-node lab (issue 44): Debian's slurm-wlm and munge, slurmctld and
munged in the root namespace on the lab's bridge address, one slurmd per lab node. No Ray is started:
the jobs start it, as on a real site (examples/slurm/*.sbatch through `ray symmetric-run`).

A lab node for Slurm is its network namespace entered with `nsenter --net` plus `unshare` (its own
mount, UTS and PID namespaces): slurmd 22.05 starts its cgroup plugin whatever the config says and,
under `ip netns exec` (which remounts /sys), fails "No filesystem mounted on /sys/fs/cgroup"; here a
fresh sysfs shows the node's own interfaces and the host's cgroup tree is bound back under it. Its
host name is `h-slmI` while Slurm calls it `slmI` (NodeHostname), so a row naming `slmI` proves the
Slurm name came from Slurm. Its own PID namespace keeps `ray symmetric-run` from seeing the other
nodes' Ray (it refuses to start beside another cluster's processes) and its own /tmp/ray keeps their
session folders apart; PID 1 of each is a small reaper, so the processes a stopping Ray leaves are
reaped and the job ends. Ports of the controller and slurmd are the lab's own (not 6817/6818).

Everything is stopped by the PIDs and namespaces started here (munged and slurmctld by their own
process sessions, slurmd and all a job started by the node's network namespace: cluster.down)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import time

import pytest

from orchestrator.lab import cluster as labmod
from orchestrator.lab import raynodes
from tests.lab.conftest import Lab, require_lab

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV = sys.prefix  # the venv running the tests: the jobs run the same collbench

DAEMONS = ("slurmctld", "slurmd", "munged", "sbatch", "scontrol", "sinfo", "scancel")
# The lab's stand-in for proctrack/cgroup, which a site uses and this host cannot (no cgroup tree of its
# own to give each job): what a job left on its node when it ended (Ray's daemons, which `ray start`
# detaches from the job's process tree, so that proctrack/linuxproc neither signals nor kills them
# when the job is cancelled) is killed by the node's Epilog. It sees its own node only (/proc of the
# node's PID namespace) and spares PID 1, slurmd and slurmstepd, and itself with its ancestors.
EPILOG = """import os, signal
keep, pid = {1}, os.getpid()
while pid > 1:
    keep.add(pid)
    with open(f"/proc/{pid}/stat") as f:
        pid = int(f.read().rsplit(")", 1)[1].split()[1])
for entry in os.listdir("/proc"):
    if not entry.isdigit() or int(entry) in keep:
        continue
    try:
        with open(f"/proc/{entry}/comm") as f:
            if f.read().strip() in ("slurmd", "slurmstepd"):
                continue
        os.kill(int(entry), signal.SIGKILL)
    except OSError:
        pass
"""
REAPER = ("import os, subprocess, sys\n"
          "child = subprocess.Popen(sys.argv[1:])\n"
          "while True:\n"
          "    try:\n"
          "        pid, _ = os.wait()\n"
          "    except ChildProcessError:\n"
          "        break\n"
          "    if pid == child.pid:\n"
          "        break\n")


SEARCH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin"])  # daemons live in sbin


def which(name: str) -> str | None:
    return shutil.which(name, path=SEARCH)


def missing() -> list[str]:
    """What this host lacks for a Slurm lab (.ci/run installs slurm-wlm and munge)."""
    return [name for name in (*DAEMONS, "nsenter", "unshare") if not which(name)]


@contextlib.contextmanager
def lab_slurm(labs, nodes: int, leaves: int = 1):
    """A SlurmLab for a test module (after the other labs are closed: one at a time on this 2-core
    host), torn down after it; skipped, or failed under COLLBENCH_REQUIRE_LAB, without Slurm."""
    require_lab()
    lacking = missing()
    if lacking:
        message = f"the Slurm lab needs {', '.join(lacking)} (apt-get install slurm-wlm munge)"
        if os.environ.get("COLLBENCH_REQUIRE_LAB"):
            pytest.fail(message + " (required: COLLBENCH_REQUIRE_LAB is set)")
        pytest.skip(message)
    labs.close()
    Lab._third_octet += 1
    lab = SlurmLab("s" + os.urandom(2).hex(), nodes, f"10.214.{Lab._third_octet}.0/24", leaves=leaves)
    try:
        yield lab
    finally:
        lab.down()


class SlurmLab:
    """`nodes` Slurm nodes slm0.. on a lab network `name` (undeclared, 400mbit links); with `leaves`,
    on that many leaf bridges (`collbench lab up --leaves`), which Slurm knows from a topology.conf
    (topology/tree) naming them leaf0.. over a spine."""

    def __init__(self, name: str, nodes: int, subnet: str, link: str = "400mbit", leaves: int = 1) -> None:
        self.name, self.nodes = name, nodes
        self.sessions: list[int] = []
        self.state = labmod.up(name, nodes, 1, link, subnet, start_ray=False, declared=False, leaves=leaves)
        self.dir = os.path.join(self.state.state_dir, "slurm")
        try:
            self._start()
        except BaseException:
            self.down()
            raise

    @property
    def env(self) -> dict[str, str]:
        """The environment for Slurm's commands (and, through sbatch, the jobs): no lab Ray address."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "SLURM_"))}
        return {**env, "SLURM_CONF": os.path.join(self.dir, "slurm.conf"), "PATH": SEARCH}

    def _start(self) -> None:
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        key = os.path.join(self.dir, "munge.key")
        with open(os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
            f.write(os.urandom(1024))
        self.socket = os.path.join(self.dir, "munge.sock")
        self._daemon(["munged", "--force", "--foreground", "-S", self.socket, "--key-file", key,
                      "--pid-file", self._p("munged.pid"), "--log-file", self._p("munged.log"),
                      "--seed-file", self._p("munge.seed")], "munged.out")
        self._wait(lambda: os.path.exists(self.socket), 30, "munged did not open its socket")
        host = socket.gethostname().split(".")[0]
        st = self.state
        with open(self._p("hosts"), "w") as f:
            f.write(f"127.0.0.1 localhost\n{st.head_ip} {host}\n")
            f.writelines(f"{st.node_ip(i)} h-slm{i}\n" for i in range(self.nodes))
        ctld_port, slurmd_port = raynodes.free_port(), raynodes.free_port()
        conf = [
            "ClusterName=cblab", f"SlurmctldHost={host}({st.head_ip})", "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", f"AuthInfo=socket={self.socket}", "CredType=cred/munge",
            f"SlurmctldPort={ctld_port}", f"SlurmdPort={slurmd_port}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core", "SchedulerType=sched/backfill", "MpiDefault=none",
            "ReturnToService=2", "MinJobAge=3600", "SlurmdParameters=config_overrides", "KillWait=10",
            f"Epilog={self._p('epilog')}",
            f"StateSaveLocation={self._p('ctld')}", f"SlurmdSpoolDir={self._p('spool-%n')}",
            f"SlurmctldPidFile={self._p('slurmctld.pid')}", f"SlurmdPidFile={self._p('slurmd-%n.pid')}",
            f"SlurmctldLogFile={self._p('slurmctld.log')}", f"SlurmdLogFile={self._p('slurmd-%n.log')}",
            *(f"NodeName=slm{i} NodeAddr={st.node_ip(i)} NodeHostname=h-slm{i} CPUs=2 State=UNKNOWN"
              for i in range(self.nodes)),
            "PartitionName=lab Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        ]
        if st.leaves > 1:  # the lab's switch tree as the site's topology/tree plugin has it, by Slurm name
            conf.append("TopologyPlugin=topology/tree")
            with open(self._p("topology.conf"), "w") as f:
                for k in range(st.leaves):
                    f.write(f"SwitchName=leaf{k} Nodes=" + ",".join(
                        f"slm{i}" for i in range(self.nodes) if st.leaf_of(i) == k) + "\n")
                f.write(f"SwitchName=spine Switches=leaf[0-{st.leaves - 1}]\n")
        with open(self._p("slurm.conf"), "w") as f:
            f.write("\n".join(conf) + "\n")
        os.makedirs(self._p("ctld"), exist_ok=True)
        with open(self._p("epilog"), "w") as f:
            f.write(f"#!{sys.executable}\n{EPILOG}")
        os.chmod(self._p("epilog"), 0o755)
        self._daemon(["slurmctld", "-D", "-f", self._p("slurm.conf")], "slurmctld.out")
        os.makedirs("/tmp/ray", exist_ok=True)
        for i, ns in enumerate(st.namespaces):
            cgroups, ray_tmp = self._p(f"cg{i}"), self._p(f"ray{i}")
            os.makedirs(cgroups, exist_ok=True)
            os.makedirs(ray_tmp, exist_ok=True)
            setup = (f"hostname h-slm{i} && mount --rbind /sys/fs/cgroup {cgroups} && mount -t sysfs sysfs /sys"
                     f" && mount --rbind {cgroups} /sys/fs/cgroup && mount --bind {self._p('hosts')} /etc/hosts"
                     f" && mount --bind {ray_tmp} /tmp/ray && mount -t proc proc /proc"
                     f" && exec {sys.executable} -c '{REAPER}' {which('slurmd')} -D -N slm{i}"
                     f" -f {self._p('slurm.conf')}")
            self._daemon(["nsenter", f"--net=/run/netns/{ns}", "unshare", "--mount", "--uts", "--pid", "--fork",
                          "--propagation", "private", "sh", "-c", setup], f"slurmd{i}.out")
        self._wait(lambda: self.states() == {f"slm{i}": "idle" for i in range(self.nodes)}, 60,
                   "the Slurm nodes did not all come up idle")

    def _p(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def _daemon(self, cmd: list[str], log: str) -> None:
        cmd = [which(cmd[0]) or cmd[0], *cmd[1:]]
        with open(self._p(log), "ab") as out:
            self.sessions.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                                  stdin=subprocess.DEVNULL, start_new_session=True).pid)

    def _wait(self, ready, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready():
                return
            time.sleep(0.5)
        logs = {name: open(self._p(name)).read()[-800:] for name in sorted(os.listdir(self.dir))
                if name.endswith((".out", ".log")) and os.path.isfile(self._p(name))}
        raise AssertionError(f"{what} within {timeout_s:.0f}s: {logs}")

    def states(self) -> dict[str, str]:
        """Each node's Slurm state (`sinfo -N`), e.g. idle, drained, allocated."""
        proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True,
                              env=self.env, timeout=30, check=False)
        return dict(line.split() for line in proc.stdout.splitlines() if len(line.split()) == 2)

    def reasons(self) -> dict[str, str]:
        proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%N|%E"], capture_output=True, text=True,
                              env=self.env, timeout=30, check=False)
        return dict(line.split("|", 1) for line in proc.stdout.splitlines() if "|" in line)

    def scontrol(self, *args: str) -> str:
        proc = subprocess.run(["scontrol", *args], capture_output=True, text=True, env=self.env, timeout=30,
                              check=False)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def scancel(self, job_id: int, *options: str) -> None:
        proc = subprocess.run(["scancel", *options, str(job_id)], capture_output=True, text=True, env=self.env,
                              timeout=30, check=False)
        assert proc.returncode == 0, proc.stderr

    def sbatch(self, script: str, cwd: str, *args: str, nodelist: str | None = None) -> int:
        """Submit `script` from `cwd` (on exactly `nodelist`, where given); its job id."""
        where = ["--nodelist", nodelist] if nodelist else []
        proc = subprocess.run(["sbatch", "--parsable", *where, script, *args], capture_output=True, text=True,
                              cwd=cwd, env=self.env, timeout=30, check=False)
        assert proc.returncode == 0, proc.stderr
        return int(proc.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        """`scontrol show job` as fields (JobState, ExitCode, ...)."""
        text = self.scontrol("show", "job", "-o", str(job_id))
        return dict(m.groups() for m in re.finditer(r"(\w+)=(\S*)", text))

    def wait_job(self, job_id: int, timeout_s: float, states=("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT",
                                                                 "NODE_FAIL", "OUT_OF_MEMORY")) -> dict[str, str]:
        """Until the job is in one of `states`; its fields."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            fields = self.job(job_id)
            if fields.get("JobState") in states:
                return fields
            time.sleep(1)
        raise AssertionError(f"job {job_id} still {self.job(job_id).get('JobState')} after {timeout_s:.0f}s")

    def down(self) -> None:
        """Stop the daemons by their sessions, then everything in the nodes' namespaces and the network."""
        raynodes.stop_sessions(self.sessions, grace_s=5.0)
        problems = labmod.down(self.state)
        assert not problems, problems


def site_script(example: str, out_dir: str, nodes: int, venv: str, what: str, values: str) -> str:
    """An example batch script with its site values substituted and nothing else changed: the node
    count, the partition (`lab`), no GPU line (the lab has none), the venv, and the sweep or
    qualify's options (`what`: SWEEP or QUALIFY; `values`: bash array items). Its path under out_dir."""
    text = open(example).read()
    edits = [(r"(?m)^#SBATCH --nodes=\d+$", f"#SBATCH --nodes={nodes}"),
             (r"(?m)^#SBATCH --gpus-per-node=\d+\n", ""),
             (r"(?m)^#SBATCH --partition=\S+$", "#SBATCH --partition=lab"),
             (r"(?m)^VENV=.*$", f"VENV={venv}"),
             (rf"(?m)^{what}=\(.*\)$", f"{what}=({values})")]
    for pattern, replacement in edits:
        text, n = re.subn(pattern, replacement, text)
        assert n == 1, f"{example}: {pattern} matched {n} times"
    path = os.path.join(out_dir, os.path.basename(example))
    with open(path, "w") as f:
        f.write(text)
    return path
