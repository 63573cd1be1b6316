"""The deployment examples an operator edits in a few places: examples/kubernetes/rayjob.yaml
against KubeRay's own RayJob schema (its CRD, tests/fixtures/kuberay/SOURCE.md: types, required
fields, enums, and no field the API server would prune as unknown), and every collbench command
they give parsed by collbench's own parser. Neither is applied to a real cluster here."""

from __future__ import annotations

import functools
import gzip
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from orchestrator.cli import build_parser
from tests.helpers import parses

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "tests" / "fixtures" / "kuberay" / "ray.io_rayjobs.v1.7.0.yaml.gz"
RAYJOB = ROOT / "examples" / "kubernetes" / "rayjob.yaml"


@functools.cache
def _schema(version: str = "v1") -> dict:
    crd = yaml.load(gzip.decompress(CRD.read_bytes()), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return next(v for v in crd["spec"]["versions"] if v["name"] == version)["schema"]["openAPIV3Schema"]


def unknown_fields(instance, schema: dict, at: str = "") -> list[str]:
    """Fields of `instance` that `schema` does not declare, where it declares its fields (an object
    with properties, no additionalProperties, not x-kubernetes-preserve-unknown-fields): what the
    API server prunes without a word, a misspelt field's fate."""
    out = []
    if isinstance(instance, dict) and "properties" in schema:
        open_ = schema.get("additionalProperties") or schema.get("x-kubernetes-preserve-unknown-fields")
        for key, value in instance.items():
            if key in schema["properties"]:
                out += unknown_fields(value, schema["properties"][key], f"{at}.{key}")
            elif not open_:
                out.append(f"{at}.{key}")
    elif isinstance(instance, list) and "items" in schema:
        for i, item in enumerate(instance):
            out += unknown_fields(item, schema["items"], f"{at}[{i}]")
    return out


def test_the_rayjob_is_what_kuberay_takes():
    jsonschema = pytest.importorskip("jsonschema")  # Ray's own dependency
    schema, job = _schema(), yaml.safe_load(RAYJOB.read_text())
    jsonschema.validate(job, schema)  # types, required fields (a worker group's groupName...), enums
    assert unknown_fields(job, schema) == []
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    spec = job["spec"]
    assert spec["shutdownAfterJobFinishes"] is True and spec["submissionMode"] in \
        schema["properties"]["spec"]["properties"]["submissionMode"].get("enum", [spec["submissionMode"]])
    (workers,) = spec["rayClusterSpec"]["workerGroupSpecs"]
    (container,) = workers["template"]["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8 and workers["replicas"] == 4
    # every Ray container knows its Kubernetes node: what the verdicts name and kubectl cordons
    heads = spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"]
    for c in [*heads, container]:
        assert {"name": "COLLBENCH_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in c["env"]
    # the entrypoint is one collbench command, as collbench's parser takes it, for those 4 x 8 GPUs
    assert parses(spec["entrypoint"]) == ""
    args = build_parser().parse_args(shlex.split(spec["entrypoint"])[1:])
    assert (int(args.wait_nodes), int(args.ranks_per_node), args.scheduler) == (workers["replicas"], 8, "kubernetes")
    assert args.output.startswith("s3://")


def test_the_schema_check_catches_what_the_api_server_would_drop_or_refuse():
    """The checks above on the example with one fault each: a misspelt field, a wrong type."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = _schema()
    job = yaml.safe_load(RAYJOB.read_text())
    job["spec"]["shutdownAfterJobFinish"] = job["spec"].pop("shutdownAfterJobFinishes")
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replica"] = 4
    assert sorted(unknown_fields(job, schema)) == [".spec.rayClusterSpec.workerGroupSpecs[0].replica",
                                                   ".spec.shutdownAfterJobFinish"]
    job = yaml.safe_load(RAYJOB.read_text())
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] = "four"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(job, schema)
    assert parses("collbench qualify --collectives all_reduce --drian").startswith("collbench: error:")


def _sbatch(name: str) -> tuple[dict[str, str], dict[str, list[str]], list[str]]:
    """A batch script's #SBATCH options, its arrays (NAME=(...)), and its collbench lines."""
    text = (ROOT / "examples" / "slurm" / name).read_text()
    options = dict((line[len("#SBATCH "):] + "=").split("=")[:2] for line in text.splitlines()
                   if line.startswith("#SBATCH --"))  # --exclusive: ""
    arrays = {m[0]: shlex.split(m[1]) for m in re.findall(r"^\s*(\w+)=\((.*)\)", text, flags=re.M)}
    commands = [line.strip().removesuffix(" &").removesuffix(" || true") for line in text.splitlines()
                if line.strip().startswith("collbench ")]
    return options, arrays, commands


@pytest.mark.parametrize("name", ["qualify.sbatch", "sweep.sbatch"])
def test_the_batch_scripts_are_bash_and_give_collbench_what_it_takes(name):
    """The scripts an operator submits (edited in the #SBATCH lines and two more): bash takes them,
    they ask for one task a node with its GPUs, and every collbench command they can run parses.
    Submitted to a real Slurm by tests/lab/test_slurm.py."""
    path = ROOT / "examples" / "slurm" / name
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True, check=False).returncode == 0
    options, arrays, (command, *after) = _sbatch(name)
    assert {"--nodes", "--ntasks-per-node", "--gpus-per-node", "--partition", "--time"} <= set(options)
    assert options["--ntasks-per-node"] == "1"  # one Ray node per Slurm node, with all its GPUs
    variants = {"qualify.sbatch": [{'"${QUALIFY[@]}"': shlex.join(arrays.get("QUALIFY", [])),
                                    '"$run_id"': "qualify-4242"}],
                "sweep.sbatch": [{'"${what[@]}"': shlex.join(["run", *arrays.get("SWEEP", [])]) + " --run-id slurm-4242"},
                                 {'"${what[@]}"': "run --resume 20261205T101500Z-a1b2c3"}]}[name]
    for substitute in variants:
        line = command
        for var, words in substitute.items():
            line = line.replace(var, words)
        assert parses(line) == "", line
        args = build_parser().parse_args(shlex.split(line)[1:])
        assert args.address == "auto"  # symmetric-run's head: the cluster of this job, never an old address
        if name == "qualify.sbatch":
            assert int(args.ranks_per_node) == int(options["--gpus-per-node"]) and args.drain
            assert args.run_id == "qualify-4242" and options["--signal"] == "B:USR1@120"
    # after scancel (sweep.sbatch): the report of the run, which marks a killed driver's manifest
    assert [parses(line.replace('"$run_id"', "slurm-4242")) for line in after] == [""] * len(after)
    assert [shlex.split(line)[:2] for line in after] == ([["collbench", "report"]] if name == "sweep.sbatch" else [])


def _block(text: str, first: str, last: str) -> str:
    """The lines of `text` from the one starting with `first` to the next one starting with `last`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith(last))
    return "\n".join(lines[start:end + 1])


def test_both_scripts_pass_sigusr1_on_as_the_one_submitted_to_slurm_does():
    """tests/lab/test_slurm.py sends SIGUSR1 to sweep.sbatch under a real Slurm; qualify.sbatch
    passes it on with the same lines (the trap, the function that finds the driver by its lock, the
    wait that outlives the trap), so that test proves both; the qualification's own stop on SIGUSR1
    is tests/lab/test_faults.py's."""
    texts = {name: (ROOT / "examples" / "slurm" / name).read_text() for name in ("qualify.sbatch", "sweep.sbatch")}
    for first, last in (("forward_usr1() {", "}"), ("trap 'trapped=1; forward_usr1' USR1", "trap"),
                        ("while [ -n \"$trapped\" ]; do", "done")):
        qualify, sweep = (_block(text, first, last) for text in texts.values())
        assert qualify == sweep and qualify.startswith(first), (first, qualify, sweep)


def test_both_scripts_meet_a_site_as_it_is_with_the_same_lines():
    """Issue 58: the site's PATH kept (the venv first: scontrol and srun may live in /opt/slurm/bin),
    the token in the environment srun passes on (no shared folder assumed), symmetric-run's other
    nodes given 10 minutes for the head, the head's address from the route to another node (never
    /etc/hosts' loopback), all the node's memory and no CPU binding for the Ray step; the same lines
    in both scripts, so the real Slurm of tests/lab/test_slurm.py proves both."""
    texts = {name: (ROOT / "examples" / "slurm" / name).read_text() for name in ("qualify.sbatch", "sweep.sbatch")}
    for text in texts.values():
        assert 'export PATH="$VENV/bin:$PATH"' in text and "/usr/bin:/bin" not in text
        assert "RAY_AUTH_TOKEN_PATH" not in text and "export RAY_AUTH_MODE=token RAY_AUTH_TOKEN" in text
        assert "export RAY_SYMMETRIC_RUN_CLUSTER_WAIT_TIMEOUT=600" in text and "#SBATCH --mem=0" in text
        assert "hostname --ip-address" not in text and "--cpu-bind=none" in text
    for first, last in (("export PATH=", "export RAY_SYMMETRIC_RUN_CLUSTER_WAIT_TIMEOUT"),
                        ("nodes=$(scontrol show hostnames", "head_ip=")):
        qualify, sweep = (_block(text, first, last) for text in texts.values())
        assert qualify == sweep, (first, qualify, sweep)
