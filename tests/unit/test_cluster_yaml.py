"""cluster.yaml and every example pass Ray's own offline validation (the schema shipped in the
installed ray), plus what the schema cannot check."""

import copy
import re
from pathlib import Path

import jsonschema
import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = [ROOT / "cluster.yaml", *sorted((ROOT / "examples").glob("*.yaml"))]


CLOUD = [p for p in CONFIGS if yaml.safe_load(p.read_text())["provider"]["type"] != "local"]
ONPREM = ROOT / "examples" / "onprem.yaml"


def _full(path: Path) -> dict:
    full = prepare_config(copy.deepcopy(yaml.safe_load(path.read_text())))
    validate_config(full)
    return full


def _start_commands(full: dict) -> tuple[list[str], list[str]]:
    return ([c for c in full["head_start_ray_commands"] if "ray start" in c],
            [c for c in full["worker_start_ray_commands"] if "ray start" in c])


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_every_cluster_file_starts_ray_with_token_auth_and_a_private_dashboard(path):
    """What every file shares (issue 27): Ray's schema passes; token auth in every start command,
    the head's and the workers' (a worker without it fails with InvalidAuthToken) and the token
    sent to every node; the dashboard on the head's localhost; the monitor started on the head."""
    full = _full(path)
    heads, workers = _start_commands(full)
    assert len(heads) == 1 and workers
    assert all("RAY_AUTH_MODE=token" in c for c in heads + workers)
    assert full["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"
    assert "--dashboard-host=127.0.0.1" in heads[0]  # never open to the internet
    assert "--autoscaling-config=~/ray_bootstrap_config.yaml" in heads[0]  # the autoscaler, v1 or v2
    assert re.search(r"--num-cpus=0\b", heads[0])  # no ranks on the head
    assert any("collbench" in c and "pip" in c and "install" in c for c in full["setup_commands"])


@pytest.mark.parametrize("path", CLOUD, ids=[p.name for p in CLOUD])
def test_cloud_cluster_files_are_sane(path):
    """Cloud providers run under `ray up`'s default v2 autoscaler, which schedules by the resources
    each node type declares (no instance-type lookup): every type declares its CPUs and GPUs, and no
    start command overrides the autoscaler version `ray up` exports."""
    full = _full(path)
    types = full["available_node_types"]
    head = types[full["head_node_type"]]
    workers = [t for name, t in types.items() if name != full["head_node_type"]]
    assert head["resources"].get("GPU", 0) == 0 and head["resources"].get("CPU", 0) == 0  # no ranks on the head
    assert workers and all(w["resources"]["GPU"] == 8 and w["resources"]["CPU"] > 0 for w in workers)
    assert all(w["min_workers"] >= 2 for w in workers)  # a multi-node sweep right after `ray up`
    assert full["file_mounts"]["~/collbench"] == "."
    assert not any("enable_autoscaler_v2" in c for c in sum(_start_commands(full), []))
    assert full["provider"]["use_internal_ips"] is True


def test_the_onprem_file_is_what_the_local_provider_needs():
    """The local provider (issue 27): the v1 autoscaler on the head (v2 never launches its workers),
    every worker asked for at once, no `ray stop` (it would end other people's Ray processes),
    every node's address given, collbench sent as a wheel."""
    full = _full(ONPREM)
    assert full["provider"]["type"] == "local" and "available_node_types" not in yaml.safe_load(ONPREM.read_text())
    heads, workers = _start_commands(full)
    assert "RAY_enable_autoscaler_v2=0" in heads[0]
    (node_type,) = full["available_node_types"].values()  # what Ray makes of the top-level counts
    assert node_type["min_workers"] == node_type["max_workers"] == len(full["provider"]["worker_ips"])
    assert not any("ray stop" in c for c in full["head_start_ray_commands"] + full["worker_start_ray_commands"])
    assert "--node-ip-address=REPLACE_HEAD_IP" in heads[0] and all("--node-ip-address=" in c for c in workers)
    assert full["file_mounts"]["~/collbench-dist"] == "./dist"
    assert all("RAY_AUTH_TOKEN_PATH=~/.ray/auth_token" in c for c in heads + workers)


def test_validation_catches_mistakes():
    cfg = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    bad = copy.deepcopy(cfg)
    bad["head_node_type"] = "nope"
    with pytest.raises(ValueError, match="`head_node_type` must be one of `available_node_types`"):
        validate_config(prepare_config(bad))
    bad = copy.deepcopy(cfg)
    bad["max_workerz"] = 3
    with pytest.raises(jsonschema.ValidationError, match="'max_workerz' was unexpected"):
        validate_config(prepare_config(bad))


def test_efa_is_in_the_image_and_nccl_cannot_fall_back():
    """rayproject/ray images carry no libfabric and no aws-ofi-nccl: the AWS cluster runs the image
    built from docker/efa.Dockerfile, and NCCL_NET makes NCCL fail rather than use sockets."""
    cfg = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    docker = cfg["docker"]
    assert "collbench-efa" in docker["image"] and not docker["image"].startswith("rayproject/")
    assert "--env NCCL_NET=OFI" in docker["run_options"]
    assert "--ulimit memlock=-1:-1" in docker["run_options"] and "--privileged" in docker["run_options"]
    assert "--gpus all" in docker["worker_run_options"]
    assert not any("LD_LIBRARY_PATH" in c for c in cfg["setup_commands"])  # nothing relies on the host's libs
    recipe = (ROOT / "docker" / "efa.Dockerfile").read_text()
    base = re.search(r"^ARG RAY_IMAGE=(\S+)$", recipe, re.M).group(1)
    assert re.fullmatch(r"rayproject/ray:\d+\.\d+\.\d+-py3\d+-cu\d+", base)  # a CUDA build of Ray's image
    assert base.split(":")[1].split("-")[0] == docker["image"].rsplit(":", 1)[1]  # same Ray version as tagged
    assert re.search(r"efa_installer\.sh -y -g --skip-kmod --skip-limit-conf --no-verify", recipe)
    # LD_LIBRARY_PATH: test_efa_image_ld_library_path_has_no_empty_entry
    assert "NCCL_NET_PLUGIN=ofi" in recipe and recipe.rstrip().endswith("USER ray")


def test_gcp_gpu_nodes_get_their_driver_before_docker():
    """Deep Learning VM images install the NVIDIA driver only with the metadata key, and Ray adds
    the GPU runtime only when nvidia-smi works as the container starts (Ray's GCP GPU example)."""
    cfg = yaml.safe_load((ROOT / "examples" / "gcp-a3.yaml").read_text())
    head = cfg["head_node_type"]
    for name, node in cfg["available_node_types"].items():
        if name == head:
            assert "initialization_commands" not in node  # a CPU head never gets nvidia-smi
            continue
        conf = node["node_config"]
        assert {"key": "install-nvidia-driver", "value": "True"} in conf["metadata"]["items"]
        assert {"onHostMaintenance": "TERMINATE"} in conf["scheduling"]
        (wait,) = node["initialization_commands"]
        assert wait.startswith("timeout ") and "until nvidia-smi" in wait
    assert "--gpus all" in cfg["docker"]["worker_run_options"]


def _cuda_tag(image: str) -> str:
    """'rayproject/ray:2.60.0-py311-cu128' -> 'cu128'."""
    return re.fullmatch(r"rayproject/ray:\d+\.\d+\.\d+-py3\d+-(cu\d+)", image).group(1)


@pytest.mark.parametrize("name", ["cluster.yaml", "examples/gcp-a3.yaml"])
def test_torch_is_pinned_to_a_build_for_the_images_cuda_before_collbench(name):
    """The registry's torch is a CUDA 13 build (driver >= 580): the cluster files install a pinned torch
    from PyTorch's index for the image's CUDA first, so collbench's `torch>=2.4` keeps it."""
    from orchestrator.sweep.devices import CUDA_DRIVER_FLOOR, parse_version

    cfg = yaml.safe_load((ROOT / name).read_text())
    if name == "cluster.yaml":  # the image is built from docker/efa.Dockerfile
        recipe = (ROOT / "docker" / "efa.Dockerfile").read_text()
        image = re.search(r"^ARG RAY_IMAGE=(\S+)$", recipe, re.MULTILINE).group(1)
    else:
        image = cfg["docker"]["image"]
    tag = _cuda_tag(image)
    setup = cfg["setup_commands"]
    torch_at = next(i for i, c in enumerate(setup) if re.search(r"\btorch\b", c))
    collbench_at = next(i for i, c in enumerate(setup) if "~/collbench" in c)
    assert torch_at < collbench_at
    m = re.fullmatch(r"pip install -q 'torch==(\d+\.\d+\.\d+)' --index-url https://download\.pytorch\.org/whl/(cu\d+)",
                     setup[torch_at])
    assert m and m.group(2) == tag, setup[torch_at]  # exactly one version, built for the image's CUDA
    major = int(tag[2:-1])
    assert major in CUDA_DRIVER_FLOOR and parse_version(CUDA_DRIVER_FLOOR[major]) < (580,)  # not a CUDA 13 build
    if name != "cluster.yaml":  # a Deep Learning VM family names the CUDA its driver is for: same major or newer
        for node in cfg["available_node_types"].values():
            family = node["node_config"]["disks"][0]["initializeParams"]["sourceImage"]
            host_cuda = re.search(r"common-cu(\d+)", family).group(1)
            assert int(host_cuda[:-1]) >= major


def _run_instructions(recipe: str) -> list[str]:
    """The Dockerfile's RUN commands, continuation lines joined as Docker joins them."""
    joined = re.sub(r"\\\n", "", recipe)
    return [ln[len("RUN "):] for ln in joined.splitlines() if ln.startswith("RUN ")]


def test_efa_image_build_fails_without_the_ofi_plugin(tmp_path):
    """The image's own check, run by sh as the build runs it: it passes only when libnccl-net-ofi.so
    is in a directory of LD_LIBRARY_PATH (where NCCL looks for it)."""
    import subprocess

    recipe = (ROOT / "docker" / "efa.Dockerfile").read_text()
    (check,) = [r for r in _run_instructions(recipe) if "libnccl-net-ofi.so" in r]
    env_at, check_at = recipe.index("ENV LD_LIBRARY_PATH="), recipe.index(check.split(";")[0])
    assert env_at < recipe.index("libnccl-net-ofi.so (aws-ofi-nccl)") and check_at  # runs after the path is set
    empty, plugin = tmp_path / "efa-lib", tmp_path / "ofi-lib"
    empty.mkdir(), plugin.mkdir()

    def build(ld_path: str) -> subprocess.CompletedProcess:
        return subprocess.run(["sh", "-c", check], env={"LD_LIBRARY_PATH": ld_path, "PATH": "/usr/bin:/bin"},
                              capture_output=True, text=True, timeout=10, check=False)

    missing = build(f"{empty}:/nonexistent")
    assert missing.returncode == 1 and "libnccl-net-ofi.so (aws-ofi-nccl) is in no directory" in missing.stderr
    (plugin / "libnccl-net-ofi.so").write_bytes(b"")
    found = build(f"{empty}:{plugin}")
    assert found.returncode == 0 and f"aws-ofi-nccl plugin: {plugin}/libnccl-net-ofi.so" in found.stdout


@pytest.mark.parametrize("base", ["", "/usr/local/nvidia/lib64"])
def test_efa_image_ld_library_path_has_no_empty_entry(base):
    """Docker expands ${VAR:+word} as sh does: the image's LD_LIBRARY_PATH, with the base image's
    empty or set, never has an empty entry (which would mean the current directory)."""
    import subprocess

    recipe = (ROOT / "docker" / "efa.Dockerfile").read_text()
    value = re.search(r"^ENV LD_LIBRARY_PATH=(\S+)$", recipe, re.MULTILINE).group(1)
    got = subprocess.run(["sh", "-c", f'printf %s "{value}"'], env={"LD_LIBRARY_PATH": base},
                         capture_output=True, text=True, timeout=10, check=True).stdout
    entries = got.split(":")
    assert "" not in entries and entries[:3] == ["/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu",
                                                 "/opt/amazon/ofi-nccl/lib", "/opt/amazon/efa/lib"]
    assert entries[3:] == ([base] if base else [])


def test_only_the_first_efa_card_has_an_ip_interface():
    """cards 1-31 are efa-only (no ENA interface, no address) so that NCCL's bootstrap and gloo cannot
    choose an interface whose replies leave by another card."""
    cfg = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    (gpu,) = [t for n, t in cfg["available_node_types"].items() if n != cfg["head_node_type"]]
    nics = gpu["node_config"]["NetworkInterfaces"]
    assert sorted(n["NetworkCardIndex"] for n in nics) == list(range(32))
    first = [n for n in nics if n["NetworkCardIndex"] == 0]
    assert first == [{**first[0], "DeviceIndex": 0, "InterfaceType": "efa"}]
    assert all(n["InterfaceType"] == "efa-only" and n["DeviceIndex"] == 0 for n in nics if n["NetworkCardIndex"])
