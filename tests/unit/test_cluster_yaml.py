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


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_cluster_config_is_valid_and_sane(path):
    cfg = yaml.safe_load(path.read_text())
    full = prepare_config(copy.deepcopy(cfg))
    validate_config(full)
    types = full["available_node_types"]
    head = types[full["head_node_type"]]
    workers = [t for name, t in types.items() if name != full["head_node_type"]]
    assert head["resources"].get("GPU", 0) == 0 and head["resources"].get("CPU", 0) == 0  # no ranks on the head
    assert workers and all(w["resources"]["GPU"] == 8 for w in workers)  # 8-GPU instances advertise them
    assert all(w["min_workers"] >= 2 for w in workers)  # a multi-node sweep right after `ray up`
    assert any("pip install" in c and "collbench" in c for c in full["setup_commands"])
    assert full["file_mounts"]["~/collbench"] == "."
    starts = full["head_start_ray_commands"] + full["worker_start_ray_commands"]
    assert all("RAY_AUTH_MODE=token" in c for c in starts if "ray start" in c)
    head_start = next(c for c in full["head_start_ray_commands"] if "ray start" in c)
    assert "--dashboard-host=127.0.0.1" in head_start  # never open to the internet
    assert full["provider"]["use_internal_ips"] is True


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
    ld_path = re.search(r"^ENV LD_LIBRARY_PATH=(\S+)$", recipe, re.M).group(1).split(":")
    assert "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu" in ld_path and "/opt/amazon/efa/lib" in ld_path
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
