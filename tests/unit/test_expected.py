"""Expected values: platform detection on recorded /sys trees, the shipped table's entries and
their sources, user files, and % of expected with below_expected flags on known data."""

from pathlib import Path

import pytest

from orchestrator.analysis import expected
from orchestrator.errors import UsageError
from orchestrator.sweep.platform import detect, gpu_tag

SYS = Path(__file__).resolve().parents[1] / "fixtures" / "sys"
H100 = ["NVIDIA H100 80GB HBM3"] * 8


def test_an_h100_node_with_infiniband():
    p = detect(str(SYS / "h100_ib"), env={}, nvidia_smi_names=H100)
    assert p.tags == ("h100-sxm", "gpus-8", "ib-ndr", "ib-ndr-x8", "roce-200", "roce-200-x1")
    assert p.key == "gpus-8+h100-sxm+ib-ndr+ib-ndr-x8+roce-200+roce-200-x1"
    assert p.instance_type is None and len(p.nics) == 9 and p.gpus == 8


def test_a_p5_with_efa():
    p = detect(str(SYS / "p5_efa"), env={}, nvidia_smi_names=H100)
    assert p.tags == ("h100-sxm", "gpus-8", "efa", "efa-x32", "aws-p5")
    assert p.instance_type == "p5.48xlarge" and {n.kind for n in p.nics} == {"EFA"}


def test_a_cpu_only_node_and_a_lab_node(tmp_path):
    assert detect(str(SYS / "cpu_only"), env={}).tags == ("cpu",)
    declared = tmp_path / "expected.yaml"
    declared.write_text("entries:\n  - {collective: '*', topology: inter, min_bytes: 1M, busbw_gbps: 0.125}\n")
    lab = detect(str(SYS / "cpu_only"), env={"COLLBENCH_PLATFORM": "lab", "COLLBENCH_EXPECTED": str(declared)})
    assert lab.tags == ("cpu", "lab") and lab.declared[0]["busbw_gbps"] == 0.125


@pytest.mark.parametrize("name, tag", [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA H200", "h200-sxm"),
    ("NVIDIA A100-SXM4-80GB", "a100-sxm"), ("NVIDIA A100-PCIE-40GB", "a100-pcie"), ("NVIDIA B200", "b200"),
    ("NVIDIA H100 NVL", "h100-nvl"), ("Tesla T4", None), ("NVIDIA GB300", "gb300"), ("NVIDIA GB200", "gb200"),
])
def test_gpu_tags(name, tag):
    assert gpu_tag(name) == tag


def test_the_shipped_table_cites_a_source_for_every_entry():
    entries = expected.shipped()
    assert len(entries) >= 18 and all(e.source and e.meaning in ("typical", "line", "derived") for e in entries)
    platforms = {e.platform for e in entries}
    assert {"h100-sxm", "h200-sxm", "a100-sxm", "b200", "h100-pcie", "ib-ndr", "ib-hdr", "aws-p5", "aws-p4d"} <= platforms
    assert any(e.transport == "GPUDirectTCPX" for e in entries) and any(e.transport == "FasTrak" for e in entries)


def _best(tags, collective, topology, size, world=8, transports=""):
    fits = [e for e in expected.shipped() if e.applies(set(tags), collective, topology, size, world, transports)]
    return max(fits, key=expected.Entry.rank) if fits else None


def test_the_most_specific_entry_applies():
    h100 = ["h100-sxm", "gpus-8", "ib-ndr", "ib-ndr-x8"]
    assert _best(h100, "all_reduce", "intra", 1 << 30, transports="NVLS+P2P/NVL").busbw_gbps == 480
    assert _best(h100, "all_reduce", "intra", 1 << 30, transports="P2P/NVL").busbw_gbps == 370  # ring
    assert _best(h100, "all_gather", "intra", 1 << 30).busbw_gbps == 370
    assert _best(h100, "all_reduce", "intra", 1 << 20) is None  # below the size it holds from
    assert _best(h100, "all_reduce", "inter", 1 << 30).busbw_gbps == 48
    assert _best(h100, "all_reduce", "mixed", 1 << 30).busbw_gbps == 370
    assert _best(["h100-sxm", "gpus-8"], "all_reduce", "mixed", 1 << 30, transports="P2P/NVL GPUDirectTCPX_v7").busbw_gbps == 66


def test_user_files_are_checked_and_win(tmp_path):
    good = tmp_path / "mine.yaml"
    good.write_text("- {collective: all_reduce, topology: inter, min_bytes: 64M, busbw_gbps: 40, source: our acceptance}\n"
                    "- {platform: h100-sxm, collective: '*', topology: intra, min_bytes: 1G, busbw_gbps: 350}\n")
    mine = expected.load(str(good), "user")
    assert [(e.platform, e.collective, e.min_bytes, e.origin) for e in mine] == [
        ("*", "all_reduce", 64 << 20, "user"), ("h100-sxm", "*", 1 << 30, "user")]
    fits = [e for e in mine + expected.shipped() if e.applies({"h100-sxm", "ib-ndr"}, "all_reduce", "inter", 1 << 30, 2, "")]
    assert max(fits, key=expected.Entry.rank).busbw_gbps == 40  # the user's entry wins over ib-ndr's 48
    bad = tmp_path / "bad.yaml"
    for text, message in [
        ("- {topology: inter}\n", "entry 1: missing busbw_gbps"),
        ("- {topology: sideways, busbw_gbps: 1}\n", "entry 1: topology 'sideways': one of intra, inter, mixed"),
        ("- {topology: inter, busbw_gbps: 1, bandwidth: 2}\n", "entry 1: unknown field 'bandwidth'"),
        ("- {topology: inter, busbw_gbps: -3}\n", "busbw_gbps -3: must be positive"),
        ("- {topology: inter, busbw_gbps: 1, min_bytes: lots}\n", "min_bytes 'lots': expected a byte size"),
        ("- {topology: inter\n  busbw_gbps: 1}\n", "not valid YAML at line 2"),
    ]:
        bad.write_text(text)
        with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
            expected.load(str(bad), "user")


def test_report_shows_percent_of_expected_and_flags_below_it(tmp_path):
    """Synthetic links at 10 GB/s between nodes and 40 inside: a user file says so; a node whose
    NIC runs at half rate is below_expected in every group that crosses it."""
    import json

    from tests.helpers import run_main
    from tests.synthetic import write_cluster_run

    mine = tmp_path / "expected.yaml"
    mine.write_text("- {collective: all_reduce, topology: inter, min_bytes: 16M, busbw_gbps: 10, source: spec sheet}\n"
                    "- {collective: all_reduce, topology: intra, min_bytes: 16M, busbw_gbps: 40, source: spec sheet}\n")
    write_cluster_run(str(tmp_path / "ok"), "ok", nodes=4, ranks_per_node=2, patterns=("intra", "inter"),
                      platform="cpu+lab")
    proc = run_main(["report", str(tmp_path / "ok"), "--expected", str(mine), "--format", "json"])
    rep = json.loads(proc.stdout)
    assert proc.returncode == 0, [f["message"] for f in rep["flags"]]
    rows = rep["tables"]["expected"]
    assert {(r["topology"], r["size"]) for r in rows} == {(t, s) for t in ("intra", "inter") for s in ("16M", "64M")}
    assert all(95 <= r["pct_of_expected"] <= 100 and r["origin"] == "user" and r["source"] == "spec sheet" for r in rows)
    (side,) = rep["tables"]["intra_vs_inter"]
    assert side["expected_ratio"] == 4 and side["measured_ratio"] == pytest.approx(4, rel=0.03)

    write_cluster_run(str(tmp_path / "bad"), "bad", nodes=4, ranks_per_node=1, patterns=("inter", "pairwise"),
                      platform="cpu+lab", faults=(("node_nic", 2, 0.5),))
    proc = run_main(["report", str(tmp_path / "bad"), "--expected", str(mine), "--format", "json"])
    rep = json.loads(proc.stdout)
    below = [f for f in rep["flags"] if f["kind"] == "below_expected"]
    assert proc.returncode == 1 and below and all("10.0.0.12" in f["nodes"] for f in below)
    assert all(f["reference"] == 10 and f["source"] == "spec sheet" and 0.45 < f["fraction"] < 0.55 for f in below)
    # every group that crosses node 2: pairs (0,2), (1,2), (2,3) (pairwise, and inter k=2), all four (inter k=4)
    assert {tuple(f["nodes"]) for f in below} == {("10.0.0.10", "10.0.0.12"), ("10.0.0.11", "10.0.0.12"),
                                                  ("10.0.0.12", "10.0.0.13"),
                                                  ("10.0.0.10", "10.0.0.11", "10.0.0.12", "10.0.0.13")}


def test_a_cluster_below_expected_everywhere_names_the_worst_groups_and_counts_the_rest(tmp_path):
    """8 nodes, every pair measured (28 groups) and an entry no pair reaches: the 20 worst pairs
    are flagged one by one (node 3's halved NIC puts its 7 pairs among them), the other 8 in one
    flag of their count, naming no node; the report stays linear in the run's groups."""
    import json

    from tests.helpers import run_main
    from tests.synthetic import write_cluster_run

    mine = tmp_path / "expected.yaml"
    mine.write_text("- {collective: all_reduce, topology: inter, min_bytes: 16M, busbw_gbps: 100, source: spec sheet}\n")
    write_cluster_run(str(tmp_path / "run"), "slow", nodes=8, ranks_per_node=1, patterns=("pairwise",),
                      platform="cpu+lab", faults=(("node_nic", 3, 0.5),))
    proc = run_main(["report", str(tmp_path / "run"), "--expected", str(mine), "--format", "json"])
    below = [f for f in json.loads(proc.stdout)["flags"] if f["kind"] == "below_expected"]
    one_by_one = [f for f in below if f["nodes"]]
    (rest,) = [f for f in below if not f["nodes"]]
    assert proc.returncode == 1 and len(one_by_one) == expected.TOP_BELOW == 20
    assert rest["groups"] == 28 - 20 and "8 more all_reduce inter group(s)" in rest["message"]
    assert sum("10.0.0.13" in f["nodes"] for f in one_by_one) == 7  # every pair of the slow node is named
    assert max(f["fraction"] for f in one_by_one) <= rest["fraction"]  # the named are the worst
    assert len({tuple(f["nodes"]) for f in one_by_one}) == 20


@pytest.mark.parametrize("topology, intra, net, fabric, cls", [
    ("intra", "NVLS+P2P/NVL", None, None, "NVLS"),
    ("intra", "P2P/NVL", None, None, "NVLink"),
    ("intra", "P2P/PIX+SHM", None, None, "PCIe"),
    ("intra", "SHM", None, None, "SHM"),
    ("intra", None, None, None, None),  # an import: the rows do not say
    ("intra", None, "gloo/tcp/lo", None, "TCP"),
    ("intra-domain", "P2P/NVL", None, None, "MNNVL"),
    ("mixed", "P2P/NVL", "IB/GDRDMA", None, "IB"),
    ("mixed", "P2P/NVL", "IB/GDRDMA", "RoCE", "RoCE"),  # NCCL's IB transport over Ethernet: doctor's facts say
    ("inter", None, "AWS Libfabric/GDRDMA", None, "EFA"),
    ("inter", None, "Socket/eth0", "IB", "TCP"),  # a fallback to sockets is TCP, whatever NICs the node has
])
def test_a_rows_transport_class(topology, intra, net, fabric, cls):
    from orchestrator.analysis import transport_class

    assert transport_class.of(topology, intra, net, fabric) == cls


def test_an_entry_keyed_by_transport_class_applies_to_that_class_only():
    """Issue 57: a RoCE floor never judges an NVLink or InfiniBand row; an intra row whose transport
    is unknown (an import) is compared as NVLink (assumed), never as a network."""
    roce = expected.Entry("mixed", 456.0, min_bytes=1 << 30, platform="h100-sxm", transport_class="RoCE")
    nvlink = expected.Entry("intra", 370.0, platform="h100-sxm", transport_class="NVLink")
    args = ({"h100-sxm"}, "all_reduce", "mixed", 1 << 30, 16, "P2P/NVL IB/GDRDMA")
    assert roce.applies(*args, row_class="RoCE") and not roce.applies(*args, row_class="IB")
    assert not roce.applies(*args, row_class=None)  # a network's class is never assumed
    intra = ({"h100-sxm"}, "all_reduce", "intra", 1 << 30, 8, "")
    assert nvlink.applies(*intra, row_class=None) and not nvlink.applies(*intra, row_class="PCIe")
    assert not roce.applies(*intra, row_class=None)
    from orchestrator.analysis import transport_class

    facts = {"10.0.0.1": {"rdma": [{"kind": "RoCE"}, {"kind": "RoCE"}]}, "10.0.0.2": {"rdma": []}}
    assert transport_class.fabric_of(facts) == "RoCE" and transport_class.fabric_of(None) is None
