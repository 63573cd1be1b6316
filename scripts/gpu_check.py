"""The GPU check in one call, within a time budget (default 6 minutes, so that a second attempt fits
in a 15-minute lease): install, one Ray instance for every step, then each step in turn, its time
and its outcome on a line of its own, and one verdict (scripts/gpu_verdict.py). Standard library
only until the install step has run (the GPU image has no Ray).

    bash scripts/gpu_check.sh [--bundle DIR] [--evidence DIR] [--rehearse] [--budget 6m]

Steps (docs/GPU.md says what each proves on one GPU and on eight):
  install     the offline bundle beside the image's own Python (scripts/install_bundle.sh), or
              `pip install -e .` where a registry answers
  facts       nvidia-smi's GPUs and -q, topo -m, nvlink --status saved as evidence; torch's view
  ray         one Ray head for every later step (its own temp dir and port; stopped by its
              process session at the end, never `ray stop`)
  doctor      collbench doctor's facts of this node (the real nvidia-smi's, on a GPU)
  sweep       every collective and dtype, out of place and in place, 1K to 256M (x64: the 8-GPU
              NVLink floor's size is reached), on every GPU
  tests/gpu   the GPU tests, on the sweep's rows where they can (one sweep, not two)
  overlap, cuda-graph, replay     with two ranks or more (one rank: not exercised, said)
  report      `collbench report --format json`: flags are read, a crash is a failure
  verdict     one line, PASS or FAIL, and what was not exercised or not run, each named

--rehearse: the same steps without a GPU (gloo on two CPU ranks stands in where a step has a CPU
form); the GPU-only steps and checks are named as not run. tests/lab/test_gpu_rehearsal.py runs it
in a copy of the tree, offline, with a Python laid out as the GPU machine's.
Exit 0 only when every step that ran passed; a bad argument exits 2 with one line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from orchestrator.lab import raynodes  # noqa: E402  (standard library only)

COLLECTIVES = "all_reduce,all_gather,reduce_scatter,all_to_all,all_to_allv,broadcast,reduce,send_recv"
# 1K, 64K, 4M, 256M: x64 steps reach 256M, the size the 8-GPU NVLink floor is judged at
GPU_SIZES = ("-b", "1K", "-e", "256M", "-f", "64")
CPU_SIZES = ("-b", "1K", "-e", "1M", "-f", "32")
# Seconds each step may take at most; the budget can cut a step shorter (what is left of it, less
# what the closing steps need), so the whole check ends within the budget.
TIMEOUTS_S = {"install": 90, "facts": 30, "ray": 45, "doctor": 30, "sweep": 150, "tests/gpu": 120,
              "overlap": 40, "cuda-graph": 40, "replay": 40, "report": 20, "verdict": 30}
CLOSING_S = TIMEOUTS_S["report"] + TIMEOUTS_S["verdict"]
TAIL_LINES = 25  # lines of a failed step's output repeated on the console
NVIDIA_SMI = {"nvidia-smi-q.txt": ["-q"], "nvidia-smi-topo-m.txt": ["topo", "-m"],
              "nvidia-smi-nvlink-status.txt": ["nvlink", "--status"]}


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
        None when it timed out, its output)."""
        timeout_s = min(TIMEOUTS_S[name], self.left_s() - (0 if closing else CLOSING_S))
        if timeout_s < 5:
            self._record(Step(name, "failed", 0.0, f"no time left in the {self.budget_s:.0f} s budget"))
            return None, ""
        began = time.monotonic()
        rc, output = _run(cmd, self.env, timeout_s, self.evidence / "gpu_check.log")
        seconds = time.monotonic() - began
        if rc is None:
            step = Step(name, "failed", seconds, f"timed out after {timeout_s:.0f} s")
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
    """`cmd` in a process session of its own (killed whole on timeout), output to the log as it comes."""
    lines: list[str] = []
    with open(log_path, "a") as log:
        log.write(f"$ {' '.join(cmd)}\n")
        log.flush()
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True)

        def pump() -> None:
            for line in proc.stdout:
                lines.append(line)
                log.write(line)
                log.flush()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raynodes.stop_sessions([proc.pid], grace_s=3)
            rc = None
        reader.join(timeout=5)
    return rc, "".join(lines)


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


_TORCH_FACTS = """
import json, torch
gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
facts = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpus": gpus,
         "nccl": ".".join(map(str, torch.cuda.nccl.version())) if gpus else None,
         "cc": list(min(torch.cuda.get_device_capability(i) for i in range(gpus))) if gpus else None,
         "names": sorted({torch.cuda.get_device_name(i) for i in range(gpus)})}
print("torch facts:", json.dumps(facts))
"""


def facts(check: Check) -> dict | None:
    """torch's view of the GPUs; nvidia-smi's outputs saved as evidence (fixtures to be)."""
    smi = shutil.which("nvidia-smi", path=check.env.get("PATH"))
    if smi:
        for name, args in NVIDIA_SMI.items():
            done = subprocess.run([smi, *args], capture_output=True, text=True, timeout=20, check=False)
            (check.evidence / name).write_text(done.stdout + done.stderr)
    rc, output = check.run("facts", [sys.executable, "-c", _TORCH_FACTS])
    found = re.search(r"^torch facts: (.*)$", output, re.M)
    if rc != 0 or not found:
        return None
    torch_facts = json.loads(found.group(1))
    check.say(f"torch {torch_facts['torch']}, CUDA {torch_facts['cuda']}, NCCL {torch_facts['nccl']}, "
              f"{torch_facts['gpus']} GPU(s) {', '.join(torch_facts['names'])}"
              + ("" if smi else "; no nvidia-smi on PATH"))
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


def start_ray(check: Check, gpus: int) -> int | None:
    """One Ray head for the whole check, in a process session of its own; its session id. The GPUs
    torch sees are given to Ray (`--num-gpus`), not left to its own detection through NVML."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    temp = tempfile.mkdtemp(prefix="cbg", dir="/tmp")  # short: Ray's socket paths are limited
    # a token of its own, for the head and every client of the check: Ray 2.60 turns token
    # authentication on where a token file (~/.ray/auth_token) exists, and a client without
    # RAY_AUTH_MODE=token is then refused ("InvalidAuthToken")
    check.env.update(raynodes.auth_env(str(check.scratch / "auth_token")))
    began = time.monotonic()
    cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", "--disable-usage-stats",
           "--port", str(port), "--node-ip-address", "127.0.0.1", "--temp-dir", temp,
           "--include-dashboard=false", *(["--num-gpus", str(gpus)] if gpus else [])]
    with open(check.evidence / "gpu_check.log", "a") as log:
        log.write(f"$ {' '.join(cmd)}\n")
        sid = subprocess.Popen(cmd, cwd=REPO, env=check.env, stdout=log, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, start_new_session=True).pid
    address = f"127.0.0.1:{port}"
    if not raynodes.wait_port("127.0.0.1", port, TIMEOUTS_S["ray"] - 10):
        check.skip("ray", "failed", f"Ray's head did not listen on {address} within {TIMEOUTS_S['ray'] - 10} s")
        return sid
    rc, _ = check.run("ray", [sys.executable, "-c", _RAY_READY, address, "20"])
    check.steps[-1].seconds = time.monotonic() - began
    if rc == 0:
        check.env["RAY_ADDRESS"] = address
    return sid


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
    sizes = CPU_SIZES if check.rehearse else GPU_SIZES
    iters = ["-n", "5"] if check.rehearse else ["-n", "20"]
    check.run("sweep", [*om, "run", *common, "--collectives", COLLECTIVES, "-d", "all", *sizes, *iters,
                        "--output", str(sweep)])
    tests = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/gpu"]
    check.env["COLLBENCH_GPU_SWEEP"] = str(sweep)
    if check.rehearse:
        # no GPU: every test skips with the gate's reason; this proves the tests import and collect
        check.run("tests/gpu", tests, judge=lambda rc, output: ("ok", "skipped without a GPU, the gate's reason "
                                                                     "above" if " skipped" in output else ""))
    else:
        check.env["COLLBENCH_REQUIRE_GPU"] = "1"
        check.run("tests/gpu", tests)
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
    checks = [c for c in facts.get("cluster", [])] + [c for n in facts.get("nodes", []) for c in n.get("checks", [])]
    failed = sorted({c["name"] for c in checks if c.get("status") == "fail"})
    return "ok", f"{len(checks)} checks, failed: {', '.join(failed)}" if failed else f"{len(checks)} checks ok"


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


def collect_nccl_logs(check: Check, folder: Path) -> None:
    """Every worker's NCCL log in one file (the device tool brings back at most 8 files)."""
    logs = sorted(folder.glob("*.log"))
    if not logs:
        return
    with open(check.evidence / "nccl.log", "w") as out:
        for path in logs:
            out.write(f"==> {path.name} <==\n")
            out.write(path.read_text(errors="replace")[: 2 << 20])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_check.sh", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, help="offline bundle folder (scripts/offline_bundle.sh); without "
                        "it, pip installs this checkout from a registry")
    parser.add_argument("--evidence", type=Path, help="folder for the outputs worth keeping: this log, nvidia-smi's "
                        "-q, topo -m and nvlink --status, NCCL's logs, doctor and report JSON (default: $OUT "
                        "where set, else a new temporary folder)")
    parser.add_argument("--rehearse", action="store_true", help="no GPU: gloo on two CPU ranks where a step has a "
                        "CPU form, the GPU-only steps named as not run")
    parser.add_argument("--budget", default="6m", help="the whole check's time, e.g. 360s or 6m (default 6m)")
    args = parser.parse_args(argv)
    budget = re.fullmatch(r"(\d+)([sm]?)", args.budget)
    if not budget or int(budget.group(1)) == 0:
        parser.error(f"--budget '{args.budget}' is not a duration such as 360s or 6m")
    budget_s = int(budget.group(1)) * (60 if budget.group(2) == "m" else 1)
    if args.bundle is not None and not args.bundle.is_dir():
        parser.error(f"--bundle '{args.bundle}' is not a folder")
    evidence = args.evidence or (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    evidence = evidence or Path(tempfile.mkdtemp(prefix="gpu-check-evidence-"))
    evidence.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    check = Check(args.rehearse, budget_s, evidence, scratch)
    nccl_logs = scratch / "nccl"
    nccl_logs.mkdir()
    check.env["NCCL_DEBUG_FILE"] = str(nccl_logs / "nccl.%h.%p.log")
    check.env["PYTHONUNBUFFERED"] = "1"
    check.say(f"{'rehearsal (no GPU)' if args.rehearse else 'GPU check'} of {REPO}, budget {budget_s} s, "
              f"evidence -> {evidence}")
    ray_session = None
    try:
        if not install(check, args.bundle):
            return _close(check)
        torch_facts = facts(check)
        if torch_facts is None:
            return _close(check)
        if not args.rehearse and not torch_facts["gpus"]:
            check.env["COLLBENCH_REQUIRE_GPU"] = "1"  # tests/gpu then fail with the reason torch has none
            check.run("tests/gpu", [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/gpu"])
            check.skip("sweep", "failed", "torch sees no GPU (tests/gpu says why)")
            return _close(check)
        ray_session = start_ray(check, 0 if args.rehearse else torch_facts["gpus"])
        if "RAY_ADDRESS" not in check.env:
            return _close(check)
        results = scratch / "results"
        measure(check, torch_facts, results)
        report(check, results / "sweep")
        verdict(check, results / "sweep")
    finally:
        if ray_session is not None:
            raynodes.stop_sessions([ray_session], grace_s=5)
        collect_nccl_logs(check, nccl_logs)
        shutil.rmtree(scratch, ignore_errors=True)
    return _close(check)


def _close(check: Check) -> int:
    total_s = time.monotonic() - check.start_s
    check.say("steps: " + ", ".join(f"{s.name} {s.outcome} {s.seconds:.0f}s" for s in check.steps))
    failed = check.failed()
    over = f"; over the {check.budget_s:.0f} s budget" if total_s > check.budget_s else ""
    check.say(f"{'FAILED: ' + ', '.join(s.name for s in failed) if failed else 'every step that ran passed'}"
              f" | {total_s:.0f} s in all{over} | evidence in {check.evidence}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
