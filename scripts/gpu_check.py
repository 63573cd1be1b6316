"""The GPU check in one call, within a time budget (default 6 minutes; a pass on one H200 took 77 s
and the machine's start about 30 s of the device tool's 15 minutes): install, one Ray instance for
every step, then each step in turn, its time and its outcome on a line of its own, and one verdict
(scripts/gpu_verdict.py). Standard library only until the install step has run (the GPU image has
no Ray). A failed check prints the call for a second attempt within what is left of the lease.

    bash scripts/gpu_check.sh --prepare                  here: the bundle, fresh, and the call to make
    bash scripts/gpu_check.sh [--bundle DIR] [--evidence DIR] [--rehearse] [--budget 6m]

The prepared call (docs/GPU.md), with the device tool, after `--prepare` and the last code change:

    run(command="PATH=/opt/torch/.venv/bin:$PATH RAY_memory_monitor_refresh_ms=0 bash scripts/gpu_check.sh
        --bundle .bundle --evidence $OUT --budget 360s", carry=[".bundle"], timeout_s=420)

PATH puts the image's own python3 first (the one holding torch); RAY_memory_monitor_refresh_ms=0
keeps Ray from killing workers while the machine's memory is still growing (the check sets it too).

Steps (docs/GPU.md says what each proves on one GPU and on eight):
  install     the offline bundle beside the image's own Python (scripts/install_bundle.sh), or
              `pip install -e .` where a registry answers; a bundle built from other sources than
              this tree's is refused first (exit 2): --prepare builds a fresh one
  nvidia-smi  -q, topo -m and nvlink --status saved as evidence (each guarded by a timeout)
  facts       torch's view: its version, CUDA, the NCCL headers it was built with, the GPUs
  ray         one Ray head for every later step (its own temp dir and port, Ray's memory monitor
              off: the machine's memory grows as it is used; stopped by its process session at
              the end, never `ray stop`)
  doctor      collbench doctor's facts of this node (the real nvidia-smi's, on a GPU)
  sweep       every collective (--collectives all) and dtype, out of place and in place, 1K to
              256M (x64: the 8-GPU NVLink floor's size is reached), on every GPU
  tests/gpu   the GPU tests on the sweep's rows (one sweep, not two); their CPU form in a rehearsal
  overlap, cuda-graph, replay     with two ranks or more (one rank: not exercised, said)
  report      `collbench report --format json`: flags are read, a crash is a failure
  verdict     one line, PASS or FAIL, and what was not exercised or not run, each named

Evidence (at most 8 files, what the device tool brings back): gpu_check.log, nvidia-smi-q.txt,
nvidia-smi-topo-m.txt, nvidia-smi-nvlink-status.txt, nccl.log (every worker's NCCL log),
doctor.json, report.json, and results.tar.gz (the runs' rows and manifests, the tails of Ray's
session logs, `pip list` of the interpreter that ran).

--rehearse: the same steps without a GPU (gloo on two CPU ranks stands in where a step has a CPU
form); every GPU-only step and check is named as not run. tests/lab/test_gpu_rehearsal.py runs it
in a copy of the tree, offline, with a Python 3.12 laid out as the GPU machine's.
Exit 0 only when every step that ran passed; a bad argument, or a stale bundle, exits 2 with one line.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
import bundle_plan  # noqa: E402  (standard library only)

from orchestrator.lab import raynodes  # noqa: E402  (standard library only)

# 1K, 64K, 4M, 256M: x64 steps reach 256M, the size the 8-GPU NVLink floor is judged at
GPU_SIZES = ("-b", "1K", "-e", "256M", "-f", "64")
CPU_SIZES = ("-b", "1K", "-e", "1M", "-f", "32")
# Seconds each step may take at most; the budget can cut a step shorter (what is left of it, less
# what the closing steps need), so the whole check ends within the budget.
TIMEOUTS_S = {"install": 90, "nvidia-smi": 60, "facts": 30, "ray": 45, "doctor": 30, "sweep": 150,
              "tests/gpu": 120, "overlap": 40, "cuda-graph": 40, "replay": 40, "report": 20, "verdict": 30}
CLOSING_S = TIMEOUTS_S["report"] + TIMEOUTS_S["verdict"]
TAIL_LINES = 25  # lines of a failed step's output repeated on the console
NVIDIA_SMI = {"nvidia-smi-q.txt": ["-q"], "nvidia-smi-topo-m.txt": ["topo", "-m"],
              "nvidia-smi-nvlink-status.txt": ["nvlink", "--status"]}
# each call's share of the step's time: -q first and most (a cold driver's first call initialises it)
NVIDIA_SMI_SHARES = (0.6, 0.2, 0.2)
RAY_LOG_TAIL_BYTES = 64 << 10  # of each Ray session log, in results.tar.gz
NCCL_LOG_BYTES = 2 << 20  # of each worker's NCCL log, in nccl.log
# The prepared call (docs/GPU.md): the image's interpreter first on PATH, Ray's memory monitor off
IMAGE_PYTHON_BIN = "/opt/torch/.venv/bin"
BUNDLE_ARGS = ("--python", "3.12", "--image", "scripts/images/nvidia-h200.txt")
MACHINE_START_S = 150  # what a machine's start and the transfers take of the device tool's time
CALL_SLACK_S = 60  # the call's timeout beyond the check's budget (install's unpacking, the copy back)
MAX_BUDGET_S = 600 - CALL_SLACK_S  # the device tool runs one command for at most 600 s
DEFAULT_BUDGET = "6m"


@dataclass
class Step:
    name: str
    outcome: str  # "ok", "failed", "not run" or "not exercised"
    seconds: float = 0.0
    note: str = ""


@dataclass
class Check:
    rehearse: bool
    budget_s: float
    evidence: Path
    scratch: Path
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    steps: list[Step] = field(default_factory=list)
    start_s: float = field(default_factory=time.monotonic)

    def say(self, line: str) -> None:
        print(f"[gpu_check] {line}", flush=True)
        with open(self.evidence / "gpu_check.log", "a") as log:
            log.write(f"[gpu_check] {line}\n")

    def left_s(self) -> float:
        return self.budget_s - (time.monotonic() - self.start_s)

    def run(self, name: str, cmd: list[str], ok_codes: tuple[int, ...] = (0,), closing: bool = False,
            judge: Callable[[int, str], tuple[str, str]] | None = None, show_lines: int = 2
            ) -> tuple[int | None, str]:
        """Run one step: its output to the log, its time and outcome to the console (`judge(rc,
        output)` -> (outcome, note) where the exit code alone does not say). Returns (exit code or
        None when it timed out or could not start, its output)."""
        timeout_s = self.timeout_s(name, closing)
        if timeout_s is None:
            return None, ""
        began = time.monotonic()
        rc, output = _run(cmd, self.env, timeout_s, self.evidence / "gpu_check.log")
        seconds = time.monotonic() - began
        if rc is None:
            step = Step(name, "failed", seconds, output.strip().splitlines()[-1] if output.startswith("could not")
                        else f"timed out after {timeout_s:.0f} s")
        elif rc not in ok_codes:
            step = Step(name, "failed", seconds, f"exit {rc}")
        else:
            outcome, note = judge(rc, output) if judge else ("ok", "")
            step = Step(name, outcome, seconds, note)
        lines = output.rstrip().splitlines()
        shown = TAIL_LINES if step.outcome == "failed" else show_lines
        for line in lines[max(0, len(lines) - shown):]:
            print(f"    {line}", flush=True)
        self._record(step)
        return rc, output

    def timeout_s(self, name: str, closing: bool = False) -> float | None:
        """The step's timeout within what is left of the budget; None (the step recorded as
        failed) where under 5 s are left."""
        timeout_s = min(TIMEOUTS_S[name], self.left_s() - (0 if closing else CLOSING_S))
        if timeout_s < 5:
            self._record(Step(name, "failed", 0.0, f"no time left in the {self.budget_s:.0f} s budget"))
            return None
        return timeout_s

    def skip(self, name: str, outcome: str, why: str) -> None:
        self._record(Step(name, outcome, 0.0, why))

    def _record(self, step: Step) -> None:
        self.steps.append(step)
        note = f": {step.note}" if step.note else ""
        self.say(f"step {step.name}: {step.outcome.upper() if step.outcome == 'failed' else step.outcome}"
                 f" in {step.seconds:.1f} s{note}")

    def failed(self) -> list[Step]:
        return [s for s in self.steps if s.outcome == "failed"]


def _run(cmd: list[str], env: dict[str, str], timeout_s: float, log_path: Path) -> tuple[int | None, str]:
    """`cmd` in a process session of its own (killed whole on timeout), output to the log as it
    comes. (None, "could not start ...") where the program cannot be started: never a traceback."""
    lines: list[str] = []
    with open(log_path, "a") as log:
        log.write(f"$ {' '.join(cmd)}\n")
        log.flush()
        try:
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True)
        except OSError as e:
            message = f"could not start {cmd[0]}: {e.strerror or e}"
            log.write(message + "\n")
            return None, message

        def pump() -> None:
            for line in proc.stdout:
                lines.append(line)
                try:
                    log.write(line)
                    log.flush()
                except ValueError:  # the log closed: a process that escaped its session still writes
                    pass

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raynodes.stop_sessions([proc.pid], grace_s=3)
            rc = None
        reader.join(timeout=5)
    return rc, "".join(lines)


# -- the bundle: fresh, or refused ---------------------------------------------------------------
def bundle_problem(bundle: Path, python: str, image: Path | None = None) -> str | None:
    """Why `bundle` cannot serve this tree on Python `python` (no archive for it, no record of its
    sources, other sources; with `image`, another list of the image's packages), or None."""
    archive = bundle / f"collbench-offline-py{python.replace('.', '')}.tar.xz"
    rebuild = "build it again, `bash scripts/gpu_check.sh --prepare`"
    if not archive.is_file():
        held = ", ".join(p.name for p in sorted(bundle.glob("collbench-offline-py*.tar.xz"))) or "none"
        return f"--bundle '{bundle}' holds no {archive.name} for Python {python} (it holds: {held}): {rebuild}"
    record_path = bundle / archive.name.replace(".tar.xz", ".json")
    try:
        record = json.loads(record_path.read_text())
    except FileNotFoundError:
        return (f"--bundle '{bundle}' holds no {record_path.name} "
                f"(no record of the sources it was built from): {rebuild}")
    except (OSError, ValueError) as e:
        return f"--bundle '{bundle}': {record_path.name} does not read as JSON ({e}): {rebuild}"
    differ = bundle_plan.source_difference(record.get("sources") or {}, REPO)
    if differ:
        return (f"--bundle '{bundle}' was built from other sources than this tree's (commit "
                f"{str(record.get('commit'))[:12]}, {record.get('built_utc')}; {differ}): "
                f"{rebuild} after the last change")
    if image is not None and record.get("image_sha256") != hashlib.sha256(image.read_bytes()).hexdigest():
        return f"--bundle '{bundle}' was built for another list of the image's packages than {image.name}: {rebuild}"
    return None


def prepare(bundle: Path, budget: str) -> int:
    """Here, with a registry: a fresh bundle for the GPU machine in `bundle` (built again where it is
    missing, stale, or for another Python or image list), then the one call to make with the device tool."""
    try:  # the device tool carries paths of the tree, relative to its root
        carried = bundle.resolve().relative_to(REPO).as_posix()
    except ValueError:
        print(f"gpu_check: error: --bundle {bundle} is outside the tree ({REPO}): the device tool carries only the "
              "tree's paths; build the bundle inside it (the default: .bundle)", file=sys.stderr)
        return 2
    image = REPO / BUNDLE_ARGS[3]
    problem = bundle_problem(bundle, BUNDLE_ARGS[1], image) if bundle.is_dir() else f"no folder {bundle} yet"
    if problem:
        if bundle.is_dir():
            own = [p for p in bundle.iterdir() if p.name.startswith("collbench-offline-py")]
            if len(own) != len(list(bundle.iterdir())):
                print(f"gpu_check: error: --bundle {bundle} holds files other than a bundle's; remove them or choose "
                      "another folder", file=sys.stderr)
                return 2
        print(f"gpu_check: building the bundle: {problem}", flush=True)
        for path in bundle.glob("collbench-offline-py*") if bundle.is_dir() else []:
            path.unlink()
        rc = build_bundle(bundle)
        if rc != 0:
            return rc
        problem = bundle_problem(bundle, BUNDLE_ARGS[1], image)
        if problem:
            print(f"gpu_check: error: {problem}", file=sys.stderr)
            return 1
    record = json.loads((bundle / f"collbench-offline-py{BUNDLE_ARGS[1].replace('.', '')}.json").read_text())
    archives = sorted(bundle.glob("collbench-offline-py*.tar.xz"))
    mib = sum(a.stat().st_size for a in archives) / 2**20
    dirty = " with uncommitted changes" if record.get("uncommitted_changes") else ""
    print(f"gpu_check: {bundle} is built from this tree's sources (commit {str(record.get('commit'))[:12]}{dirty}; "
          f"{', '.join(a.name for a in archives)}, {mib:.1f} MiB). The call, with the device tool:\n"
          f"  {_call(carried, _budget_s(budget))}")
    return 0


def build_bundle(bundle: Path) -> int:
    """offline_bundle.sh for the GPU machine into `bundle` (minutes; it needs the package registry)."""
    return subprocess.run(["bash", str(REPO / "scripts/offline_bundle.sh"), str(bundle), *BUNDLE_ARGS],
                          cwd=REPO, check=False).returncode


def _call(bundle: str, budget_s: int | str, timeout_s: int | str | None = None) -> str:
    """The device tool's call for this check (docs/GPU.md): the command, what it carries, its timeout
    (the budget and CALL_SLACK_S more)."""
    timeout_s = timeout_s if timeout_s is not None else int(budget_s) + CALL_SLACK_S
    return (f'run(command="PATH={IMAGE_PYTHON_BIN}:$PATH RAY_memory_monitor_refresh_ms=0 bash scripts/gpu_check.sh '
            f'--bundle {bundle} --evidence $OUT --budget {budget_s}s", carry=["{bundle}"], timeout_s={timeout_s})')


# -- the steps -----------------------------------------------------------------------------------
def install(check: Check, bundle: Path | None) -> bool:
    if bundle is not None:
        target = check.scratch / "site"
        rc, _ = check.run("install", ["bash", str(REPO / "scripts/install_bundle.sh"), str(bundle), str(target)])
        if rc != 0:
            return False
        check.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(target), check.env.get("PYTHONPATH")]))
        check.env["PATH"] = f"{target / 'bin'}{os.pathsep}{check.env.get('PATH', '')}"
        return True
    rc, _ = check.run("install", [sys.executable, "-m", "pip", "install", "-q", "--no-compile",
                                  "--disable-pip-version-check", "-e", ".", "pytest", "pytest-timeout"])
    return rc == 0


def nvidia_smi(check: Check) -> None:
    """nvidia-smi's -q, topo -m and nvlink --status saved as evidence (fixtures to be), within the
    step's timeout: -q failing, or any of them hanging, fails the step with its reason; topo or
    nvlink refused (some VMs and drivers do) is noted."""
    smi = shutil.which("nvidia-smi", path=check.env.get("PATH"))
    if smi is None:
        check.skip("nvidia-smi", "not run" if check.rehearse else "failed",
                   "no GPU (no nvidia-smi on PATH)" if check.rehearse else "no nvidia-smi on PATH")
        return
    deadline_s = check.timeout_s("nvidia-smi")
    if deadline_s is None:
        return
    began, problems, notes = time.monotonic(), [], []
    for i, (name, args) in enumerate(NVIDIA_SMI.items()):
        what = " ".join(args)
        # each call its share of what is left, so that one that hangs leaves time for the others
        left_s = (deadline_s - (time.monotonic() - began)) * NVIDIA_SMI_SHARES[i] / sum(NVIDIA_SMI_SHARES[i:])
        if left_s < 1:
            problems.append(f"{what}: no time left")
            continue
        rc, output = _run([smi, *args], check.env, left_s, check.scratch / "nvidia-smi.log")
        (check.evidence / name).write_text(output)
        first = next((ln.strip() for ln in output.splitlines() if ln.strip()), "")
        if rc is None:
            problems.append(f"{what}: {first if output.startswith('could not') else f'timed out after {left_s:.0f} s'}")
        elif rc != 0:
            (problems if args == ["-q"] else notes).append(f"{what}: exit {rc}: {first[:100]}")
    seconds = time.monotonic() - began
    if problems:
        check._record(Step("nvidia-smi", "failed", seconds, "; ".join(problems + notes)))
    else:
        check._record(Step("nvidia-smi", "ok", seconds, "; ".join([f"{len(NVIDIA_SMI)} outputs saved", *notes])))


_TORCH_FACTS = """
import json, torch
gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
header = torch.cuda.nccl.version() if gpus else None  # NCCL_MAJOR/MINOR/PATCH of torch's build, not the loaded library
facts = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpus": gpus,
         "nccl_headers": ".".join(map(str, header)) if header else None,
         "cc": list(min(torch.cuda.get_device_capability(i) for i in range(gpus))) if gpus else None,
         "names": sorted({torch.cuda.get_device_name(i) for i in range(gpus)})}
print("torch facts:", json.dumps(facts))
"""


def facts(check: Check) -> dict | None:
    """torch's view of the GPUs; `pip list` of the interpreter kept for the evidence archive."""
    rc, output = check.run("facts", [sys.executable, "-c", _TORCH_FACTS])
    found = re.search(r"^torch facts: (.*)$", output, re.M)
    if rc != 0:
        return None
    if not found:
        check.steps[-1].outcome, check.steps[-1].note = "failed", "torch printed no facts line"
        return None
    torch_facts = json.loads(found.group(1))
    nccl = (f"NCCL headers {torch_facts['nccl_headers']} (torch's build; the loaded library's version is on every "
            "row, from NCCL's log)") if torch_facts["nccl_headers"] else "no NCCL (no GPU)"
    check.say(f"{sys.executable}: torch {torch_facts['torch']}, CUDA {torch_facts['cuda']}, {nccl}, "
              f"{torch_facts['gpus']} GPU(s) {', '.join(torch_facts['names'])}")
    listed_rc, listed = _run([sys.executable, "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check"],
                             check.env, 30, check.scratch / "pip-list.log")
    (check.scratch / "pip-list.txt").write_text(listed if listed_rc == 0 else f"pip list failed: {listed[-500:]}")
    return torch_facts


_RAY_READY = """
import sys, time, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
deadline = time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline and not [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU")]:
    time.sleep(0.5)
nodes = [n for n in ray.nodes() if n["Alive"]]
res = ray.cluster_resources()
cpus, gpus = res.get("CPU", 0), res.get("GPU", 0)
print(f"Ray {ray.__version__} at {sys.argv[1]}: {len(nodes)} node(s), {cpus:g} CPU, {gpus:g} GPU")
sys.exit(0 if nodes else 1)
"""


def start_ray(check: Check, gpus: int) -> tuple[int | None, Path]:
    """One Ray head for the whole check, in a process session of its own: (its session id, None
    where it could not start; its temp dir). The GPUs torch sees are given to Ray (`--num-gpus`),
    not left to its own detection through NVML."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    temp = Path(tempfile.mkdtemp(prefix="cbg", dir="/tmp"))  # short: Ray's socket paths are limited
    # a token of its own, for the head and every client of the check: Ray 2.60 turns token
    # authentication on where a token file (~/.ray/auth_token) exists, and a client without
    # RAY_AUTH_MODE=token is then refused ("InvalidAuthToken")
    check.env.update(raynodes.auth_env(str(check.scratch / "auth_token")))
    began = time.monotonic()
    cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", "--disable-usage-stats",
           "--port", str(port), "--node-ip-address", "127.0.0.1", "--temp-dir", str(temp),
           "--include-dashboard=false", *(["--num-gpus", str(gpus)] if gpus else [])]
    with open(check.evidence / "gpu_check.log", "a") as log:
        log.write(f"$ {' '.join(cmd)}\n")
        try:
            sid = subprocess.Popen(cmd, cwd=REPO, env=check.env, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True).pid
        except OSError as e:
            check.skip("ray", "failed", f"could not start Ray's head: {e.strerror or e}")
            return None, temp
    address = f"127.0.0.1:{port}"
    wait_s = max(5.0, min(TIMEOUTS_S["ray"] - 10, check.left_s() - CLOSING_S))
    if not raynodes.wait_port("127.0.0.1", port, wait_s):
        check.skip("ray", "failed", f"Ray's head did not listen on {address} within {wait_s:.0f} s (its output: "
                                    "gpu_check.log; its logs: results.tar.gz)")
        return sid, temp
    rc, _ = check.run("ray", [sys.executable, "-c", _RAY_READY, address, "20"])
    check.steps[-1].seconds = time.monotonic() - began
    if rc == 0:
        check.env["RAY_ADDRESS"] = address
    return sid, temp


# this interpreter, serially
TESTS = ["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "no:xdist", "tests/gpu"]


def sweep_args(rehearse: bool) -> list[str]:
    """`collbench run` options of the check's sweep: every collective of the registry, every dtype
    the backend has, both reduction operators (float8 max too), in and out of place."""
    if rehearse:
        common = ["--backend", "gloo", "--ranks-per-node", "2", "-w", "1", "-n", "5", *CPU_SIZES]
    else:
        common = ["--backend", "nccl", "-w", "5", "-n", "20", *GPU_SIZES]
    return [*common, "--patterns", "intra", "-c", "1", "--collectives", "all", "-d", "all", "--op", "sum,max"]


def measure(check: Check, torch_facts: dict, results: Path) -> None:
    """doctor, the sweep, tests/gpu, overlap, cuda-graph and replay, each judged by its exit code."""
    gpus = torch_facts["gpus"]
    ranks = 2 if check.rehearse else gpus
    om = [sys.executable, "-m", "orchestrator"]
    if check.rehearse:
        common = ["--backend", "gloo", "--ranks-per-node", "2", "--patterns", "intra", "-w", "1", "-c", "1"]
    else:
        common = ["--backend", "nccl", "--patterns", "intra", "-w", "5", "-c", "1"]
    check.run("doctor", [*om, "doctor", "--format", "json"], ok_codes=(0, 1), show_lines=1,
              judge=lambda rc, output: _doctor(check, output))
    sweep = results / "sweep"
    rc, _ = check.run("sweep", [*om, "run", *sweep_args(check.rehearse), "--output", str(sweep)])
    if not check.rehearse:
        check.env["COLLBENCH_REQUIRE_GPU"] = "1"
    if rc == 0:
        # on the sweep's rows (no GPU: the tests' CPU form, on the rehearsal's sweep)
        check.env["COLLBENCH_GPU_SWEEP"] = str(sweep)
        check.run("tests/gpu", [sys.executable, *TESTS], judge=lambda rc, output: ("ok", _pytest_summary(output)))
    else:
        check.skip("tests/gpu", "not run", "the sweep failed: no rows to test (its output is above)")
    if ranks < 2:
        why = "1 rank: NCCL puts no work on the GPU for these"
        for name in ("overlap", "cuda-graph", "replay"):
            check.skip(name, "not exercised", why)
        return
    overlap_sizes = ["-b", "1M", "-e", "4M", "-f", "4", "-n", "3"] if check.rehearse else \
        ["-b", "16M", "-e", "256M", "-f", "4", "-n", "10"]
    check.run("overlap", [*om, "run", *common, "--collectives", "overlap", "--dtypes",
                          "float32" if check.rehearse else "bfloat16", *overlap_sizes, "--output", str(sweep)])
    if check.rehearse:
        check.skip("cuda-graph", "not run", "no GPU (CUDA graphs capture device work)")
    else:
        check.run("cuda-graph", [*om, "run", *common, "--collectives", "all_reduce", "--dtypes", "bfloat16",
                                 "--cuda-graph", "-b", "1K", "-e", "64M", "-f", "8", "-n", "20",
                                 "--output", str(sweep)])
    trace = REPO / "tests/fixtures/flight_recorder" / ("tp_dp" if ranks >= 4 else "ddp")
    backend = ["--backend", "gloo", "--ranks-per-node", "2"] if check.rehearse else ["--backend", "nccl"]
    check.run("replay", [*om, "replay", str(trace), *backend, "--repeat", "2", "--output", str(results / "replay")])


def _pytest_summary(output: str) -> str:
    """pytest's last line ("6 passed, 1 skipped in 22.5s"), without its time."""
    lines = [ln.strip() for ln in output.splitlines() if re.search(r"\d+ (passed|failed|skipped)", ln)]
    return re.sub(r" in [\d.]+s.*$", "", lines[-1].strip("= ")) if lines else ""


def _json_in(output: str) -> dict | None:
    """The JSON object a command printed (its first `{` on), or None."""
    start = output.find("{")
    try:
        parsed = json.JSONDecoder().raw_decode(output[start:])[0] if start >= 0 else None
    except json.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _doctor(check: Check, output: str) -> tuple[str, str]:
    """Doctor's facts kept as evidence; a failed check of its is named (the sweep's own quick checks
    refuse the run where it matters)."""
    facts = _json_in(output)
    if facts is None:
        return "failed", "no JSON from collbench doctor (a crash)"
    (check.evidence / "doctor.json").write_text(json.dumps(facts, indent=1))
    nodes = [n for n in facts.get("nodes") or [] if isinstance(n, dict)]
    checks = [c for c in [*(facts.get("cluster") or []), *(c for n in nodes for c in n.get("checks") or [])]
              if isinstance(c, dict)]
    named = {status: sorted({c["name"] for c in checks if c.get("status") == status}) for status in ("fail", "warn")}
    counts = ", ".join(f"{len([c for c in checks if c.get('status') == status])} {status}"
                       for status in ("ok", "warn", "fail"))
    return "ok", f"{len(checks)} checks: {counts}" + "".join(
        f"; {label}: {', '.join(names)}" for label, names in (("failed", named["fail"]), ("warned", named["warn"]))
        if names)


def report(check: Check, sweep: Path) -> None:
    """Flags are read and counted; a crash (no JSON on stdout, whatever the exit code) fails the step."""
    def judge(rc: int, output: str) -> tuple[str, str]:
        parsed = _json_in(output)
        if parsed is None:
            return "failed", f"exit {rc} without a JSON report (a crash: {check.evidence / 'gpu_check.log'})"
        (check.evidence / "report.json").write_text(json.dumps(parsed, indent=1))
        return "ok", f"{len(parsed.get('flags') or [])} flag(s) (report.json)"

    check.run("report", [sys.executable, "-m", "orchestrator", "report", str(sweep), "--format", "json",
                         "--threshold", "0.99"], ok_codes=(0, 1), closing=True, judge=judge, show_lines=0)


def verdict(check: Check, sweep: Path) -> None:
    cmd = [sys.executable, str(REPO / "scripts/gpu_verdict.py"), str(sweep)]
    check.run("verdict", cmd + (["--no-gpu"] if check.rehearse else []), closing=True, show_lines=TAIL_LINES)


# -- the evidence --------------------------------------------------------------------------------
def collect_nccl_logs(check: Check, folder: Path) -> None:
    """Every worker's NCCL log in one file (the device tool brings back at most 8 files)."""
    logs = sorted(folder.glob("*.log"))
    if not logs:
        return
    try:
        with open(check.evidence / "nccl.log", "w") as out:
            for path in logs:
                out.write(f"==> {path.name} <==\n")
                out.write(path.read_text(errors="replace")[:NCCL_LOG_BYTES])
    except OSError as e:
        check.say(f"nccl.log not written: {e}")


def archive_evidence(check: Check, results: Path, ray_temp: Path | None) -> None:
    """results.tar.gz: the runs' rows and manifests (results/), the last 64 KiB of each Ray session
    log (ray-logs/: where an actor's death or an NCCL abort is explained) and `pip list`."""
    path = check.evidence / "results.tar.gz"
    try:
        with tarfile.open(path, "w:gz") as tar:
            if results.is_dir():
                tar.add(results, arcname="results")
            if (check.scratch / "pip-list.txt").is_file():
                tar.add(check.scratch / "pip-list.txt", arcname="pip-list.txt")
            logs = ray_temp / "session_latest" / "logs" if ray_temp else None
            for log in sorted(logs.rglob("*")) if logs and logs.is_dir() else []:
                if log.is_file() and log.stat().st_size:
                    with open(log, "rb") as f:
                        f.seek(max(0, log.stat().st_size - RAY_LOG_TAIL_BYTES))
                        data = f.read()
                    info = tarfile.TarInfo(f"ray-logs/{log.relative_to(logs).as_posix()}")
                    info.size, info.mtime = len(data), int(log.stat().st_mtime)
                    tar.addfile(info, io.BytesIO(data))
        check.say(f"evidence archive {path.name}: {path.stat().st_size / 2**20:.1f} MiB (rows, manifests, Ray's "
                  "log tails, pip list)")
    except OSError as e:
        check.say(f"evidence archive {path.name} not written: {e}")


def _budget_s(text: str) -> int:
    budget = re.fullmatch(r"(\d+)([sm]?)", text)
    if not budget or int(budget.group(1)) == 0:
        raise ValueError(text)
    return int(budget.group(1)) * (60 if budget.group(2) == "m" else 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_check.sh", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="docs/GPU.md: the prepared call, what a pass proves, the runs so far.")
    parser.add_argument("--bundle", type=Path, help="offline bundle folder (scripts/offline_bundle.sh; --prepare "
                        "makes it); refused (exit 2) where it was built from other sources than this tree's; "
                        "without it, pip installs this checkout from a registry")
    parser.add_argument("--evidence", type=Path, help="folder for the outputs worth keeping (8 files: this log, "
                        "nvidia-smi's -q, topo -m and nvlink --status, NCCL's logs, doctor and report JSON, "
                        "results.tar.gz; default: $OUT where set, else a new temporary folder)")
    parser.add_argument("--rehearse", action="store_true", help="no GPU: gloo on two CPU ranks where a step has a "
                        "CPU form, every GPU-only step and check named as not run")
    parser.add_argument("--budget", default=DEFAULT_BUDGET, help="the whole check's time, e.g. 360s or 6m (default "
                        f"{DEFAULT_BUDGET}); a second attempt in the same lease: the device tool's budget_left_s less "
                        f"{MACHINE_START_S} s for the machine's start and the transfers")
    parser.add_argument("--prepare", action="store_true", help="here, with a package registry: build the bundle "
                        "(--bundle, default .bundle) for the GPU machine where it is missing or older than the tree's "
                        "sources, and print the one call to make with the device tool")
    args = parser.parse_args(argv)
    try:
        budget_s = _budget_s(args.budget)
    except ValueError:
        parser.error(f"--budget '{args.budget}' is not a duration such as 360s or 6m")
    if args.prepare:
        return prepare(args.bundle or REPO / ".bundle", args.budget)
    if args.bundle is not None:
        if not args.bundle.is_dir():
            parser.error(f"--bundle '{args.bundle}' is not a folder")
        problem = bundle_problem(args.bundle, f"{sys.version_info[0]}.{sys.version_info[1]}")
        if problem:
            parser.error(problem)
    evidence = args.evidence or (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    evidence = evidence or Path(tempfile.mkdtemp(prefix="gpu-check-evidence-"))
    evidence.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    check = Check(args.rehearse, budget_s, evidence, scratch)
    nccl_logs = scratch / "nccl"
    nccl_logs.mkdir()
    check.env["NCCL_DEBUG_FILE"] = str(nccl_logs / "nccl.%h.%p.log")
    check.env["PYTHONUNBUFFERED"] = "1"
    # the GPU machine's memory starts small and grows with use; Ray's monitor would kill the newest
    # worker past 95% of the current total
    check.env["RAY_memory_monitor_refresh_ms"] = "0"
    check.env.update(raynodes.MEASURING_NICENESS)  # the ranks at nice 0, not Ray's 15
    check.say(f"{'rehearsal (no GPU)' if args.rehearse else 'GPU check'} of {REPO}, budget {budget_s} s, "
              f"evidence -> {evidence}")
    ray_session, ray_temp, results = None, None, scratch / "results"
    try:
        ray_session, ray_temp = _steps(check, args, results)
    finally:
        if ray_session is not None:
            raynodes.stop_sessions([ray_session], grace_s=5)
        collect_nccl_logs(check, nccl_logs)
        archive_evidence(check, results, ray_temp)
        shutil.rmtree(scratch, ignore_errors=True)
        if ray_temp is not None:
            shutil.rmtree(ray_temp, ignore_errors=True)
    return _close(check, args.bundle)


def _steps(check: Check, args: argparse.Namespace, results: Path) -> tuple[int | None, Path | None]:
    """Every step in turn, as far as each one lets the next run: (Ray's session, its temp dir)."""
    if not install(check, args.bundle):
        return None, None
    nvidia_smi(check)
    torch_facts = facts(check)
    if torch_facts is None:
        return None, None
    if not args.rehearse and not torch_facts["gpus"]:
        check.env["COLLBENCH_REQUIRE_GPU"] = "1"  # tests/gpu then fail with the reason torch has none
        check.run("tests/gpu", [sys.executable, *TESTS])
        check.skip("sweep", "failed", "torch sees no GPU (tests/gpu says why)")
        return None, None
    ray_session, ray_temp = start_ray(check, 0 if args.rehearse else torch_facts["gpus"])
    if "RAY_ADDRESS" in check.env:
        measure(check, torch_facts, results)
        report(check, results / "sweep")
        verdict(check, results / "sweep")
    return ray_session, ray_temp


def _close(check: Check, bundle: Path | None = None) -> int:
    total_s = time.monotonic() - check.start_s
    check.say("steps: " + ", ".join(f"{s.name} {s.outcome} {s.seconds:.0f}s" for s in check.steps))
    failed = check.failed()
    over = f"; over the {check.budget_s:.0f} s budget" if total_s > check.budget_s else ""
    check.say(f"{'FAILED: ' + ', '.join(s.name for s in failed) if failed else 'every step that ran passed'}"
              f" | {total_s:.0f} s in all{over} | evidence in {check.evidence}")
    if failed and not check.rehearse:
        check.say(f"a second attempt in the same lease (this one took {total_s:.0f} s): B = the device tool's "
                  f"budget_left_s less {MACHINE_START_S} s for the machine's start and the transfers, at most "
                  f"{MAX_BUDGET_S}; {_call(_carried(bundle), 'B', f'B + {CALL_SLACK_S}')}")
    return 1 if failed else 0


def _carried(bundle: Path | None) -> str:
    """The bundle as the device tool's carry names it (a path of the tree)."""
    if bundle is None:
        return ".bundle"
    try:
        return bundle.resolve().relative_to(REPO).as_posix()
    except ValueError:
        return str(bundle)


if __name__ == "__main__":
    sys.exit(main())
