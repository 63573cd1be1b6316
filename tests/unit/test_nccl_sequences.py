"""Three groups in one worker process, where NCCL printed its version banner, its device lists and
the libfabric provider only during the first (tests/fixtures/nccl/sequences, derived from the real
logs beside them): every group's row still reads the version and the full network."""

from pathlib import Path

import pytest

from orchestrator.execution.transport import columns
from tests.helpers import nccl_sequence_groups
from workloads import nccl_log
from workloads.messages import NcclLog, Transport

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl"
_BANNER = "NCCL INFO NCCL version "


def _groups(name: str) -> list[list[str]]:
    return nccl_sequence_groups(FIXTURES / "sequences" / name)


def _row(log: NcclLog) -> tuple[str | None, str | None]:
    """nccl_version and net_transport of a two-node group whose ranks both read `log`."""
    cols = columns("nccl", ["node-a", "node-b"], [Transport("nccl", nccl=log)] * 2)
    return cols["nccl_version"], cols["net_transport"]


SEQUENCES = [
    ("ib_a100_2.22.log", "2.22.3", "IB", None),
    ("roce_h100_2.26.log", "2.26.2", "IB/RoCE", "IB"),
    ("efa_libfabric_2.29.log", "2.29.2", "Libfabric/efa", "Libfabric"),
    ("efa_p4d_ofi_1.11.log", None, "AWS Libfabric/efa/GDRDMA", "AWS Libfabric/GDRDMA"),
    ("socket_fallback_gcp_2.19.log", "2.19.3", "Socket/ens7", "Socket"),
    ("tcpx_a3_reconstructed.log", "2.19.3", "GPUDirectTCPX_v7", None),
]


@pytest.mark.parametrize("name, version, network, network_alone", SEQUENCES)
def test_later_groups_keep_what_nccl_printed_once(tmp_path, name, version, network, network_alone):
    groups = _groups(name)
    assert len(groups) == 3
    # what the defect showed: a later group's own lines lack the process-wide facts
    alone = _row(nccl_log.parse(groups[1]))
    assert alone == (None, network_alone or network)
    # the worker's path: NCCL appends each group's lines to one file, the worker reads slices
    path = tmp_path / f"collbench-nccl.host.{len(name)}.log"
    debug = nccl_log.DebugFile(str(path))
    rows = []
    for lines in groups:
        debug.start_group()
        with path.open("a") as out:
            out.write("\n".join(lines) + "\n")
        rows.append(_row(debug.group_log()))
        # read twice in one group (join, then leave): the same account
        assert _row(debug.group_log()) == rows[-1]
    assert rows == [(version, network)] * 3


@pytest.mark.parametrize("name", [s[0] for s in SEQUENCES])
def test_the_first_group_is_the_recorded_log(name):
    """Group 1 of each sequence is its real log line for line (a banner spliced in where that log
    has none, README.md says from where); later groups hold only lines of group 1."""
    first, *later = _groups(name)
    recorded = (FIXTURES / name).read_text().splitlines()
    spliced = [line for line in first if line not in recorded]
    assert [line for line in first if line not in spliced] == recorded
    assert all(_BANNER in line for line in spliced) and len(spliced) <= 1
    skeleton = {line.split("comm 0x")[0] for line in first}
    assert all(line.split("comm 0x")[0] in skeleton for group in later for line in group)
    assert not any(_BANNER in line or "NET/IB : Using" in line or "NET/Socket : Using" in line
                   or "selected provider" in line.lower() for group in later for line in group)


def test_facts_come_from_the_first_sight_and_only_fill_gaps(tmp_path):
    path = tmp_path / "nccl.log"
    debug = nccl_log.DebugFile(str(path))
    debug.start_group()
    assert debug.group_log() == NcclLog()  # no file yet: nothing known
    path.write_text("h:1:1 [0] NCCL INFO NCCL version 2.27.7+cuda12.9\nh:1:1 [0] NCCL INFO Using network IB\n")
    # a group that left before it was read: the next group still learns the version
    debug.start_group()
    with path.open("a") as out:
        out.write("h:1:1 [0] NCCL INFO Using network Socket\n")
    log = debug.group_log()
    assert (log.version, log.network) == ("2.27.7", "Socket")  # the network is the group's own
    assert debug.facts == NcclLog(version="2.27.7")


def test_a_device_list_counts_only_under_its_network():
    # NCCL initialises IB (printing its devices) before it falls back to, or is told to use, Socket
    both = NcclLog(version="2.21.5", network="Socket", link_layers=("RoCE",), interfaces=("eth0",), provider="efa")
    assert _row(both) == ("2.21.5", "Socket/eth0")
    assert _row(NcclLog(network="IB", link_layers=("RoCE",), interfaces=("eth0",), provider="efa")) == (None, "IB/RoCE")
    assert _row(NcclLog(network="OFI", link_layers=("RoCE",), provider="efa")) == (None, "OFI/efa")
