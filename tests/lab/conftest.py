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
        """Every node's link back to the lab's rate, but `node_links`' own, and every leaf's uplink to
        its own (tc, as `lab up` shapes them)."""
        state = labmod.load(self.name)
        for i in range(len(self.node_ips)):
            labmod.shape_link(state, i, (node_links or {}).get(i, self.link))
        for k in range(state.leaves if state.leaves > 1 else 0):
            labmod.shape_uplink(state, k, state.uplink_of(k))


PLAIN_LINK = "400mbit"  # the plain labs' links; tests shape a node back to it
QUARTER_LINK = "100mbit"


class Labs:
    """One lab per shape, shared by every test that asks for it and reshaped for each (every node's
    link, and every leaf's uplink, set again to the lab's rates), instead of one lab per test module.
    At most one is kept between tests (a different shape tears it down: an idle Ray cluster costs this
    2-core host CPU, so it is also torn down after the last test of its shape: see
    pytest_runtest_teardown); tests/conftest.py runs a shape's tests one after another, those marked
    `breaks_lab` (a node's Ray stopped) last."""

    def __init__(self) -> None:
        self._kept: tuple[tuple, Lab] | None = None

    def get(self, nodes: int, ranks_per_node: int, link: str, declared: bool = True, leaves: int = 1) -> Lab:
        require_lab()
        shape = (nodes, ranks_per_node, link, declared, leaves)
        if self._kept is not None and self._kept[0] == shape:
            lab = self._kept[1]
            lab.reshape()
            return lab
        self.close()
        lab = Lab(nodes=nodes, ranks_per_node=ranks_per_node, link=link, declared=declared, leaves=leaves)
        self._kept = (shape, lab)
        return lab

    def close(self) -> None:
        if self._kept is not None:
            kept, self._kept = self._kept[1], None
            kept.down()


SHARED_LABS = ("pair", "six", "four")  # the fixtures Labs serves
POOL = Labs()


@pytest.fixture(scope="session")
def labs():
    yield POOL
    POOL.close()


@pytest.hookimpl(trylast=True)  # after pytest's own teardown: the test's fixtures (a planted fault) are undone first
def pytest_runtest_teardown(item, nextitem):
    """After the last test of a shared lab's shape, the lab goes."""
    if shared_lab_of(item) is not None and (nextitem is None or shared_lab_of(nextitem) != shared_lab_of(item)):
        POOL.close()


@pytest.fixture()
def pair(labs):
    """Two nodes of three CPU ranks each, links at 1 gbit/s, declared (the lab's line rate is their
    expected value): intra, inter and mixed groups against a rate known to the bit."""
    return labs.get(2, 3, "1gbit", declared=True)


@pytest.fixture()
def six(labs):
    """Six plain nodes (no declared rate, one CPU rank each, 400 mbit/s links) on two leaf bridges of
    three, each joined to the head's by an uplink of 1200 mbit/s (the sum of its links: non-blocking),
    the tree written as Slurm's topology.conf; every link and uplink at its rate when the test starts."""
    return labs.get(6, 1, PLAIN_LINK, declared=False, leaves=2)


@pytest.fixture()
def four(labs):
    """Four plain nodes on one bridge (no declared rate, one CPU rank each, 400 mbit/s links)."""
    return labs.get(4, 1, PLAIN_LINK, declared=False)


def shared_lab_of(item) -> str | None:
    """The shared lab a test asks for."""
    return next((f for f in SHARED_LABS if f in getattr(item, "fixturenames", ())), None)
