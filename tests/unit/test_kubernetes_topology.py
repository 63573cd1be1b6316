"""The switch tree from Kubernetes node labels (issue 46, `--topology kubernetes:LEAF_LABEL[,...]`):
each node's label value is its leaf, a second label the switch above, and the Ray nodes (pods) are
placed by their pod IPs. No API server runs on these machines: the answers below are v1 NodeList and
PodList documents in the shape `kubectl get nodes|pods -o json` prints (the labels GKE sets on its
A3/A4 nodes: cloud.google.com/gce-topology-block and -subblock), given to the parser and to a
stand-in kubectl."""

from __future__ import annotations

import json
import subprocess

import pytest

from orchestrator import scheduler
from orchestrator.errors import UsageError
from orchestrator.operations.qualify import switch_tree
from orchestrator.sweep.topology import from_kubernetes, place

SUB, BLOCK = "cloud.google.com/gce-topology-subblock", "cloud.google.com/gce-topology-block"


def _node(name: str, sub: str | None, block: str = "b1") -> dict:
    labels = {"kubernetes.io/hostname": name, BLOCK: block, **({SUB: sub} if sub else {})}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def _pod(name: str, node: str, ip: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"nodeName": node}, "status": {"podIP": ip, "podIPs": [{"ip": ip}]}}


NODES = {"apiVersion": "v1", "kind": "List", "items": [
    _node("gke-a3-1", "sb1"), _node("gke-a3-2", "sb1"), _node("gke-a3-3", "sb2"), _node("gke-a3-4", "sb2"),
    _node("gke-cpu-1", None)]}
PODS = {"apiVersion": "v1", "kind": "List", "items": [
    _pod("collbench-head", "gke-cpu-1", "10.8.0.2"), *(_pod(f"collbench-gpu-{i}", f"gke-a3-{i}", f"10.8.{i}.5")
                                                       for i in range(1, 5))]}


def test_node_labels_give_leaves_of_node_names_and_pod_ips_and_the_switch_above():
    tree = from_kubernetes(NODES, PODS, [SUB, BLOCK], "kubectl")
    assert tree.nodes == {"sb1": ("gke-a3-1", "gke-a3-2", "10.8.1.5", "10.8.2.5"),
                          "sb2": ("gke-a3-3", "gke-a3-4", "10.8.3.5", "10.8.4.5")}
    assert tree.switches == {"b1": ("sb1", "sb2")} and not tree.complete
    # the Ray nodes, as collbench sees them (a pod's IP, its host name the pod's), placed by IP;
    # the head's pod, on a node without the label, judged without a leaf
    ray_nodes = [("10.8.1.5", "collbench-gpu-1", None), ("10.8.3.5", "collbench-gpu-3", None),
                 ("10.8.0.2", "collbench-head", None)]
    assert place(tree, ray_nodes, strict=False) == {"10.8.1.5": "sb1", "10.8.3.5": "sb2"}
    assert from_kubernetes(NODES, PODS, [SUB], "k").switches == {}  # one label: leaves alone
    with pytest.raises(UsageError, match="k: no node carries the label example.com/rack"):
        from_kubernetes(NODES, PODS, ["example.com/rack"], "k")


def _kubectl(answers: dict[str, tuple[int, str, str]], calls: list):
    def run(argv, **kwargs):
        calls.append(argv)
        code, out, err = answers[argv[2]]
        return subprocess.CompletedProcess(argv, code, out, err)
    return run


def test_qualify_reads_the_labels_through_kubectl_and_says_in_one_line_where_it_cannot(monkeypatch):
    calls: list = []
    ok = {"nodes": (0, json.dumps(NODES), ""), "pods": (0, json.dumps(PODS), "")}
    tree = scheduler.kubernetes_topology(f"kubernetes:{SUB},{BLOCK}", _kubectl(ok, calls))
    assert calls == [["kubectl", "get", "nodes", "-o", "json"], ["kubectl", "get", "pods", "-o", "json"]]
    assert tree.source == f"kubectl node labels {SUB},{BLOCK}" and set(tree.nodes) == {"sb1", "sb2"}
    forbidden = {**ok, "nodes": (1, "", 'Error from server (Forbidden): nodes is forbidden: User "system:serviceaccount'
                                       ':ml:default" cannot list resource "nodes"\n')}
    with pytest.raises(UsageError) as e:
        scheduler.kubernetes_topology(f"kubernetes:{SUB}", _kubectl(forbidden, []))
    assert str(e.value) == (f"--topology kubernetes:{SUB}: kubectl get nodes -o json: exit 1: Error from server "
                            '(Forbidden): nodes is forbidden: User "system:serviceaccount:ml:default" cannot list '
                            'resource "nodes"')
    with pytest.raises(UsageError, match="kubectl get pods -o json did not answer JSON"):
        scheduler.kubernetes_topology(f"kubernetes:{SUB}", _kubectl({**ok, "pods": (0, "<html>", "")}, []))
    with pytest.raises(UsageError, match=r"name the node label of each level, lowest first"):
        scheduler.kubernetes_topology("kubernetes:", _kubectl(ok, []))
    monkeypatch.setenv("PATH", "/nonexistent")  # qualify's own path to it: no kubectl here, one line
    with pytest.raises(UsageError, match=f"--topology kubernetes:{SUB}: kubectl get nodes -o json: "):
        switch_tree(f"kubernetes:{SUB}", {})


def test_a_value_naming_switches_at_two_levels_is_one_line():
    nodes = {"items": [_node("gke-a3-1", "1", block="1"), _node("gke-a3-2", "2", block="1")]}
    with pytest.raises(UsageError, match=f"k: the value 1 names switches at two levels \\(labels {SUB}, {BLOCK}\\)"):
        from_kubernetes(nodes, PODS, [SUB, BLOCK], "k")


def test_nodes_and_exclude_take_a_kubernetes_node_name_through_its_pods():
    from orchestrator.sweep.inventory import Inventory, Node, select

    pod_env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    ok = {"pods": (0, json.dumps(PODS), "")}
    named = scheduler.aliases(("gke-a3-2", "gke-a3-9"), pod_env, _kubectl(ok, []))
    assert named == {"gke-a3-2": {"10.8.2.5"}}  # a node no pod of this namespace runs on: no alias
    ray_nodes = Inventory(tuple(Node(f"id{i}", f"10.8.{i}.5", f"collbench-gpu-{i}", 0, 1) for i in range(1, 5)))
    assert [n.ip for n in select(ray_nodes, exclude=("gke-a3-2",), aliases=named).nodes] == \
        ["10.8.1.5", "10.8.3.5", "10.8.4.5"]
    calls: list = []
    assert scheduler.aliases(("gke-a3-2",), {}, _kubectl(ok, calls)) == {} and calls == []  # not in a pod
    refused = {"pods": (1, "", "Error from server (Forbidden): pods is forbidden")}
    assert scheduler.aliases(("gke-a3-2",), pod_env, _kubectl(refused, [])) == {}  # names then match as given
