"""What docs/deploy/onprem.md ("Running on your own GPU machines") says, done on the lab: three namespaces
each running `sshd`, `ray up` of examples/onprem.yaml by Ray's own launcher (local provider), the
workers started over SSH by Ray's autoscaler, `ray dashboard` for the job server, `ray job submit`
of a small sweep, the rows read back. Every Ray process of the lab is ended by killing the
processes of its namespaces: never `ray down` or `ray stop` (on one machine those end every Ray
process of the machine).

What the test changes in the example, and why: the REPLACE values (addresses, SSH user and key);
the paths that would be the same on every real node but must not collide on one machine (the
token file, the wheel folder on the nodes, each node's Ray temp dir); and the nodes' virtual
environment, which is this test's own (it holds collbench already, so the setup command finds it
and installs nothing, exactly as on a node where a previous `ray up` installed it).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.lab import cluster as labmod
from orchestrator.lab import raynodes
from tests.lab.conftest import require_lab

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parents[2]
N_WORKERS = 2


def _require_ssh_tools() -> None:
    missing = [tool for tool in ("sshd", "ssh", "ssh-keygen", "rsync") if not shutil.which(tool)
               and not os.path.exists(f"/usr/sbin/{tool}")]
    if missing:  # .ci/run installs them; skip only where they could not be installed
        pytest.skip(f"`ray up` over SSH needs {', '.join(missing)} (apt-get install openssh-server rsync)")


def _start_sshd(ns: str, ip: str, work: Path, key_pub: Path) -> None:
    """An sshd of the test's own in namespace `ns`: its own host key and authorized keys (root's
    real ~/.ssh is not touched); ended with the namespace's processes."""
    host_key = work / f"hostkey-{ns}"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
    config = work / f"sshd-{ns}.conf"
    config.write_text(
        f"ListenAddress {ip}\nPort 22\nHostKey {host_key}\nAuthorizedKeysFile {key_pub}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        f"UsePAM no\nStrictModes no\nPidFile {work}/sshd-{ns}.pid\n"
    )
    os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege-separation directory
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    subprocess.Popen(["ip", "netns", "exec", ns, sshd, "-D", "-f", str(config), "-E", str(work / f"sshd-{ns}.log")],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)
    if not raynodes.wait_port(ip, 22, 30):
        raise AssertionError(f"sshd in {ns} did not listen on {ip}:22: " + (work / f"sshd-{ns}.log").read_text())


def _filled_example(st: labmod.LabState, work: Path, key: Path, token: Path) -> Path:
    text = (ROOT / "examples" / "onprem.yaml").read_text()
    venv = os.path.dirname(os.path.dirname(sys.executable))
    subs = [
        ("REPLACE_HEAD_IP", st.node_ip(0)),
        *((f"REPLACE_WORKER_IP_{i}", st.node_ip(i)) for i in range(1, N_WORKERS + 1)),
        ("REPLACE_SSH_USER", "root"),
        ("REPLACE_SSH_KEY", str(key)),
        ("~/collbench-venv", venv),
        ("~/.ray/auth_token", str(token)),
        ("~/collbench-dist: ./dist", f"{work}/nodes-dist: {work}/dist"),
        ("~/collbench-dist", f"{work}/nodes-dist"),
        ("ray start --head", f"ray start --head --temp-dir={work}/ray-head"),
        # one temp dir per node: raylets sharing one session dir race for its socket names
        ("ray start --address", f"ray start --temp-dir={work}/ray-$(hostname -I | tr -d ' ') --address"),
    ]
    for old, new in subs:
        assert old in text, f"examples/onprem.yaml no longer has {old!r}"
        text = text.replace(old, new)
    assert not re.search(r"REPLACE_\w+", text)
    path = work / "onprem.yaml"
    path.write_text(text)
    return path


def _alive_nodes(address: str, env: dict) -> int:
    script = "import ray,sys; ray.init(address=sys.argv[1], logging_level='ERROR'); print(sum(n['Alive'] for n in ray.nodes()))"
    try:
        proc = subprocess.run([sys.executable, "-c", script, address], capture_output=True, text=True, env=env,
                              timeout=60)
    except subprocess.TimeoutExpired:
        return 0
    lines = proc.stdout.strip().splitlines()
    return int(lines[-1]) if lines and lines[-1].isdigit() else 0


def test_ray_up_of_the_onprem_example_runs_a_sweep(tmp_path):
    require_lab()
    _require_ssh_tools()
    # short paths: Ray's unix socket names under each node's temp dir stay under ~107 characters
    work = Path(f"/tmp/cbop{secrets.token_hex(3)}")
    work.mkdir()
    home = Path(os.path.expanduser("~"))
    # `ray up` writes its bootstrap config and key to the head's home, which here is this machine's
    saved = {n: (home / n).read_bytes() for n in ("ray_bootstrap_config.yaml", "ray_bootstrap_key.pem")
             if (home / n).exists()}
    name = "o" + secrets.token_hex(2)
    subnet = f"10.215.{secrets.randbelow(200) + 20}.0/24"
    st = labmod.up(name, N_WORKERS + 1, 1, "1gbit", subnet, declared=False, start_ray=False)
    forward = None
    try:
        key = work / "key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        for i, ns in enumerate(st.namespaces):
            _start_sshd(ns, st.node_ip(i), work, Path(f"{key}.pub"))
        token = work / "auth_token"
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env.update(raynodes.auth_env(str(token)), RAY_UP_enable_autoscaler_v2="0")
        # docs/deploy/onprem.md: the wheel that file_mounts sends to the nodes
        wheel = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                                "-w", str(work / "dist"), str(ROOT)], capture_output=True, text=True, timeout=300)
        assert wheel.returncode == 0, wheel.stderr[-2000:]
        config = _filled_example(st, work, key, token)
        ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")

        up = subprocess.run([ray_bin, "up", "-y", "--no-config-cache", "-n", name, str(config)], capture_output=True, text=True,
                            env=env, cwd=ROOT, timeout=400, start_new_session=True)
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        head = f"{st.node_ip(0)}:6379"
        deadline = time.monotonic() + 300  # the autoscaler starts every worker over SSH
        alive = 0
        while time.monotonic() < deadline and alive < N_WORKERS + 1:
            alive = _alive_nodes(head, env)
            time.sleep(3)
        assert alive == N_WORKERS + 1, f"{max(alive - 1, 0)} of {N_WORKERS} workers joined; ray up: {up.stdout[-1500:]}" \
            f"; monitor log: {_monitor_log(work)}"

        port = raynodes.free_port()  # docs/deploy/onprem.md: `ray dashboard` forwards the head's job server over SSH
        forward = subprocess.Popen([ray_bin, "dashboard", "--no-config-cache", "-n", name, "-p", str(port), str(config)],
                                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        assert raynodes.wait_port("127.0.0.1", port, 60), "ray dashboard did not forward the job server"
        out = work / "results"
        job = subprocess.run(
            # docs/deploy/onprem.md: the entrypoint names the nodes' environment (a login shell's pyenv or conda
            # init may put another `python` first on the job's PATH, as on this machine)
            [ray_bin, "job", "submit", "--address", f"http://127.0.0.1:{port}", "--",
             os.path.join(os.path.dirname(sys.executable), "collbench"), "run", "--ranks-per-node", "1", "--patterns", "inter", "--collectives", "all_reduce", "-b", "1K", "-e",
             "1M", "-f", "32", "-n", "3", "-w", "1", "--output", str(out)],
            capture_output=True, text=True, env=env, timeout=400,
        )
        assert job.returncode == 0 and "succeeded" in job.stdout, job.stdout[-3000:] + job.stderr[-2000:]
        rows = pd.read_parquet(out)
        assert len(rows) == 3 and (rows.status == "ok").all() and (rows.n_wrong == 0).all()
        workers = {st.node_ip(i) for i in range(1, N_WORKERS + 1)}
        assert {ip for ips in rows.node_ips for ip in ips} == workers  # the ranks ran on the workers, none on the head
        assert set(rows.topology) == {"inter"}
    finally:
        if forward is not None:
            raynodes.stop_sessions([forward.pid], grace_s=5)
        remaining = down_and_list(st)
        for n in ("ray_bootstrap_config.yaml", "ray_bootstrap_key.pem"):
            if n in saved:
                (home / n).write_bytes(saved[n])
            else:
                (home / n).unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)
        for suffix in ("lock", "state"):  # the local provider's record of the cluster, under Ray's default temp dir
            Path(f"/tmp/ray/cluster-{name}.{suffix}").unlink(missing_ok=True)
    assert not remaining, f"left behind: {remaining}"


def down_and_list(st: labmod.LabState) -> list[str]:
    """Take the lab down; what is left of it: its namespaces, or any process still running Ray
    out of the test's paths."""
    problems = labmod.down(st)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if re.search(r"/tmp/cbop[0-9a-f]{6}/ray-", cmdline) and int(entry) != os.getpid():
                os.kill(int(entry), signal.SIGKILL)
                problems.append(f"pid {entry}: {cmdline[:80]}")
    return problems


def _monitor_log(work: Path) -> str:
    logs = sorted(work.glob("ray-head/session_*/logs/monitor.*"))
    return "".join(p.read_text(errors="replace")[-1500:] for p in logs) or "(no monitor log)"
