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
                 declared: bool = True) -> None:
        """`declared=False`: `lab up --undeclared`, no expected rate (verdicts from measurements alone)."""
        self.name = "t" + secrets.token_hex(2)
        Lab._third_octet += 1
        self.subnet = f"10.214.{Lab._third_octet}.0/24"
        self.link = link
        slow = [a for i, rate in (node_links or {}).items() for a in ("--node-link", f"{i}={rate}")]
        proc = run_cli(["lab", "up", "--name", self.name, "--nodes", str(nodes), "--cpus-per-node",
                        str(ranks_per_node), "--link", link, "--subnet", self.subnet, *slow,
                        *([] if declared else ["--undeclared"])], timeout=240)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        self.address = re.search(r"address: (\S+)", proc.stdout).group(1)
        self.up_output = proc.stdout
        self.node_ips = [self.subnet.replace(".0/24", f".{10 + i}") for i in range(nodes)]

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        return {**env, **labmod.load(self.name).auth_env()}

    def down(self) -> None:
        proc = run_cli(["lab", "down", "--name", self.name], timeout=120)
        assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="package")
def lab2x2():
    require_lab()
    lab = Lab(nodes=2, ranks_per_node=2, link="1gbit")
    yield lab
    lab.down()


PLAIN_LINK = "400mbit"  # plain4's links; test_watch shapes its slowed node back to it


@pytest.fixture(scope="module")
def plain4():
    """A plain 4-node lab (no declared rate, one CPU rank per node, 400mbit links), one per module:
    compare and watch each shape a node's link, so they do not share one."""
    require_lab()
    lab = Lab(nodes=4, ranks_per_node=1, link=PLAIN_LINK, declared=False)
    yield lab
    lab.down()
