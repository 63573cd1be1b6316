"""cluster.yaml and every example pass Ray's own offline validation (the schema shipped in the
installed ray), plus what the schema cannot check."""

import copy
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
