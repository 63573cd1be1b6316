import os
import re
import secrets
import shutil

import pytest

from orchestrator.lab import cluster as labmod
from tests.helpers import run_cli


def require_lab() -> None:
    """Lab tests need root and iproute2; in CI (COLLBENCH_REQUIRE_LAB=1) they must not skip."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root")
    if not shutil.which("ip") or not shutil.which("tc"):
        missing.append("iproute2")
    if missing:
        message = f"the multi-node lab needs {' and '.join(missing)}"
        if os.environ.get("COLLBENCH_REQUIRE_LAB"):
            pytest.fail(message + " (required: COLLBENCH_REQUIRE_LAB is set)")
        pytest.skip(message)


class Lab:
    _third_octet = secrets.randbelow(100) + 20  # distinct subnets for the labs of one test session
    def __init__(self, nodes: int, ranks_per_node: int, link: str, node_links: dict[int, str] | None = None,
                 declared: bool = True, leaves: int = 1) -> None:
        """`declared=False`: `lab up --undeclared`, no expected rate (verdicts from measurements alone);
        `leaves`: the nodes on that many leaf bridges, each joined to the head's by a shaped uplink."""
        self.name = "t" + secrets.token_hex(2)
        Lab._third_octet += 1
        self.subnet = f"10.214.{Lab._third_octet}.0/24"
        self.link = link
        slow = [a for i, rate in (node_links or {}).items() for a in ("--node-link", f"{i}={rate}")]
        proc = run_cli(["lab", "up", "--name", self.name, "--nodes", str(nodes), "--cpus-per-node",
                        str(ranks_per_node), "--link", link, "--subnet", self.subnet, *slow,
                        *([] if declared else ["--undeclared"]), "--leaves", str(leaves)], timeout=240)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert declared or "no expected rate declared" in proc.stdout, proc.stdout
        self.address = re.search(r"address: (\S+)", proc.stdout).group(1)
        self.up_output = proc.stdout
        self.node_ips = [self.subnet.replace(".0/24", f".{10 + i}") for i in range(nodes)]

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        return {**env, **labmod.load(self.name).auth_env()}

    def down(self) -> None:
        proc = run_cli(["lab", "down", "--name", self.name], timeout=120)
        assert proc.returncode == 0, proc.stderr

    def reshape(self, node_links: dict[int, str] | None = None) -> None:
        """Every node's link back to the lab's rate, but `node_links`' own (tc, as `lab up` shapes)."""
        state = labmod.load(self.name)
        for i in range(len(self.node_ips)):
            labmod.shape_link(state, i, (node_links or {}).get(i, self.link))


@pytest.fixture(scope="package")
def lab2x2():
    require_lab()
    lab = Lab(nodes=2, ranks_per_node=2, link="1gbit")
    yield lab
    lab.down()


PLAIN_LINK = "400mbit"  # the plain labs' links; test_watch shapes its slowed node back to it
QUARTER_LINK = "100mbit"


class Labs:
    """One lab per shape (nodes, ranks per node, declared or not), shared by the tests that ask for
    that shape and reshaped for each (every node's link set again), instead of one built per test
    module. At most one is kept between tests (a different shape tears it down: an idle Ray cluster
    costs this 2-core host CPU, so it is also torn down after the last test of its shape: see
    pytest_runtest_teardown); tests/conftest.py runs a shape's tests one after another."""

    def __init__(self) -> None:
        self._kept: tuple[tuple, Lab] | None = None

    def get(self, nodes: int, ranks_per_node: int, link: str, node_links: dict[int, str] | None = None,
            declared: bool = True) -> Lab:
        require_lab()
        shape = (nodes, ranks_per_node, link, declared)
        if self._kept is not None and self._kept[0] == shape:
            lab = self._kept[1]
            lab.reshape(node_links)
            return lab
        self.close()
        lab = Lab(nodes=nodes, ranks_per_node=ranks_per_node, link=link, node_links=node_links, declared=declared)
        self._kept = (shape, lab)
        return lab

    def close(self) -> None:
        if self._kept is not None:
            kept, self._kept = self._kept[1], None
            kept.down()


SHARED_LABS = ("plain4", "plain6", "plain4_node2_slow", "plain6_node4_slow")  # the fixtures Labs serves


POOL = Labs()


@pytest.fixture(scope="session")
def labs():
    yield POOL
    POOL.close()


def pytest_runtest_teardown(item, nextitem):
    """After the last test of a shared lab's shape, the lab goes."""
    if shared_lab_of(item) is not None and (nextitem is None or shared_lab_of(nextitem) != shared_lab_of(item)):
        POOL.close()


@pytest.fixture()
def plain4(labs):
    """A plain 4-node lab (no declared rate, one CPU rank per node, 400mbit links), every link at that
    rate when the test starts (compare and watch shape a node's link)."""
    return labs.get(4, 1, PLAIN_LINK, declared=False)


@pytest.fixture()
def plain6(labs):
    """Six plain nodes, as plain4."""
    return labs.get(6, 1, PLAIN_LINK, declared=False)


@pytest.fixture()
def plain4_node2_slow(labs):
    """plain4 with node 2's link at a quarter of the rate."""
    return labs.get(4, 1, PLAIN_LINK, node_links={2: QUARTER_LINK}, declared=False)


@pytest.fixture()
def plain6_node4_slow(labs):
    """plain6 with node 4's link at a quarter of the rate."""
    return labs.get(6, 1, PLAIN_LINK, node_links={4: QUARTER_LINK}, declared=False)


def shared_lab_of(item) -> str | None:
    """The shape of the shared lab a test asks for (its nodes: plain4 and plain4_node2_slow are one)."""
    name = next((f for f in SHARED_LABS if f in getattr(item, "fixturenames", ())), None)
    return name.split("_")[0] if name else None
