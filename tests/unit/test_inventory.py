"""Which nodes a run measures: --nodes and --exclude by IP, host name or Ray node id, and a caller's
placement group (the Python API's preflight), on ray.nodes()-shaped records."""

import pytest

from orchestrator.errors import UsageError
from orchestrator.sweep.inventory import from_placement_group, from_ray_nodes, select
from orchestrator.sweep.spec import SweepSpec


def _ray_node(i: int, gpus: int = 0, alive: bool = True) -> dict:
    resources = {"CPU": 8.0, "memory": 1e10, **({"GPU": float(gpus), "accelerator_type:H100": 1.0} if gpus else {})}
    return {"NodeID": f"id{i}", "NodeManagerAddress": f"10.0.0.{i}", "NodeManagerHostname": f"host{i}",
            "Alive": alive, "Resources": resources}


NODES = [_ray_node(i) for i in (3, 1, 2, 4)]


def test_nodes_and_exclude_name_nodes_by_ip_host_or_id():
    inv = from_ray_nodes(NODES, 2)
    assert [n.ip for n in select(inv).nodes] == ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]
    assert [n.ip for n in select(inv, ("10.0.0.4", "host2", "id1")).nodes] == ["10.0.0.1", "10.0.0.2", "10.0.0.4"]
    assert [n.ip for n in select(inv, exclude=("host3",)).nodes] == ["10.0.0.1", "10.0.0.2", "10.0.0.4"]
    assert [n.ip for n in select(inv, ("10.0.0.1", "10.0.0.2"), ("id2",)).nodes] == ["10.0.0.1"]
    with pytest.raises(UsageError, match=r"--exclude 10\.0\.0\.9: not a node of the cluster that can hold a rank "
                                         r"\(nodes: 10\.0\.0\.1 \(host1\), 10\.0\.0\.2 \(host2\)"):
        select(inv, exclude=("10.0.0.9",))
    with pytest.raises(UsageError, match="--nodes nope: not a node"):
        select(inv, ("nope",))
    with pytest.raises(UsageError, match="leaves no node to measure"):
        select(inv, ("host1",), ("id1",))


def test_nodes_and_exclude_are_checked_before_ray():
    with pytest.raises(UsageError, match="--exclude 10.0.0.1: also in --nodes"):
        SweepSpec(nodes=("10.0.0.1",), exclude=("10.0.0.1",))
    with pytest.raises(UsageError, match="not a node"):
        SweepSpec(exclude=("a\x00b",))


def test_a_placement_groups_bundles_are_its_ranks():
    ray_nodes = [_ray_node(1, gpus=8), _ray_node(2, gpus=8), _ray_node(3, gpus=8)]
    bundles = [("id2", {"GPU": 1.0, "CPU": 1.0}), ("id1", {"GPU": 1.0}), ("id2", {"GPU": 1.0}), ("id1", {"GPU": 1.0})]
    inv = from_placement_group(ray_nodes, bundles)
    assert [(n.ip, n.ranks, n.gpus, n.accelerator) for n in inv.nodes] == [("10.0.0.1", 2, 2, "H100"),
                                                                          ("10.0.0.2", 2, 2, "H100")]
    assert inv.use_gpus and inv.world_size == 4
    cpu = from_placement_group([_ray_node(1), _ray_node(2)], [("id1", {"CPU": 1.0})] * 3 + [("id2", {"CPU": 1.0})])
    assert [(n.ip, n.ranks, n.gpus) for n in cpu.nodes] == [("10.0.0.1", 3, 0), ("10.0.0.2", 1, 0)]
    with pytest.raises(UsageError, match="mixes GPU and CPU bundles on node 10.0.0.1"):
        from_placement_group(ray_nodes, [("id1", {"GPU": 1.0}), ("id1", {"CPU": 1.0})])
    with pytest.raises(UsageError, match="bundle on node id9, which is not alive"):
        from_placement_group(ray_nodes, [("id9", {"GPU": 1.0})])
