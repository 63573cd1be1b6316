import os

import pytest

from tests.offline import offline_cli  # noqa: F401  (a fixture: the CLI in this process, Ray out of reach)

# An empty CUDA_VISIBLE_DEVICES makes Ray's fake-GPU nodes fail to start.
if os.environ.get("CUDA_VISIBLE_DEVICES") == "":
    del os.environ["CUDA_VISIBLE_DEVICES"]


@pytest.fixture(scope="session")
def ray_head():
    """One Ray head shared by every test that runs sweeps through the CLI."""
    from tests.raycluster import RayHead

    head = RayHead()
    yield head
    head.stop()


@pytest.fixture()
def s3_server():
    """A local S3-compatible server with bucket `cbresults`: (URI query for it, credentials env)."""
    moto_server = pytest.importorskip("moto.server")
    import boto3

    from orchestrator.lab.raynodes import free_port

    port = free_port()
    srv = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    srv.start()
    creds = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_EC2_METADATA_DISABLED": "true"}
    boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                 aws_access_key_id="test", aws_secret_access_key="test").create_bucket(Bucket="cbresults")
    yield f"?endpoint_override=127.0.0.1:{port}&scheme=http&region=us-east-1", creds
    srv.stop()


# -- tiers ----------------------------------------------------------------------------------
# Plain `pytest` is what a developer runs while changing code: the unit and integration tiers.
# The lab tier (network namespaces, shaped links, `ray up` over SSH, the GPU rehearsal: every
# test under tests/lab/ and any marked `lab`) runs with --lab, or where COLLBENCH_REQUIRE_LAB is
# set (CI: .ci/run), or when a `-m` expression names the marker itself.
def pytest_addoption(parser):
    parser.addoption("--lab", action="store_true",
                     help="also run the lab tier (tests marked `lab`: root, iproute2; about 23 minutes here)")


def _lab_tier(config) -> bool:
    return bool(config.getoption("--lab") or os.environ.get("COLLBENCH_REQUIRE_LAB")
                or "lab" in (config.getoption("markexpr") or ""))


def _is_lab(item) -> bool:
    return bool(item.get_closest_marker("lab")) or item.nodeid.startswith("tests/lab/")


# -- workers ----------------------------------------------------------------------------------
# A plain run of the suite (no test file named, no lab tier) spreads over this machine's cores with
# pytest-xdist: the unit tier across them, and the tests on the session's Ray head, one after another
# on one worker (the `ray` group), beside it; the modules that build a Ray cluster of their own and
# judge no timing (fake GPU nodes, a metrics head) are a second group, so at most two clusters share
# this host, one of them never timed. A run that names a file or a test, asks for a debugger or the
# lab tier (one lab at a time: it needs the machine to itself), or gives -n itself, runs as asked.
# Without pytest-xdist the suite runs in one process, as before.
RAY_FREE = ("tests/integration/test_environment.py", "tests/integration/test_collectives.py",
            "tests/integration/test_memory.py")  # integration modules that start no Ray (gloo in spawned processes)
OWN_CLUSTER = ("tests/integration/test_placement.py", "tests/integration/test_nvlink_domains.py",
               "tests/integration/test_metrics.py")  # a cluster of their own; rows' placement, not their speed


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    if getattr(config.option, "numprocesses", "absent") is not None:  # -n given, or no pytest-xdist
        return
    if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker runs what it is sent
        return
    named = [a for a in config.args if ".py" in a]
    if named or _lab_tier(config) or config.getoption("usepdb") or config.getvalue("collectonly"):
        return
    # the unit tier alone takes a worker more than the cores: a few of its tests wait on short real
    # deadlines (a hung step killed at 5 s), which the extra worker fills (2 cores: 117 s against 127)
    unit_only = bool(config.args) and all(os.path.normpath(a).startswith(os.path.join("tests", "unit"))
                                          for a in config.args)
    config.option.numprocesses = min(os.cpu_count() or 1, 4) + unit_only
    config.option.ray_together = True


class RayTogether:
    """The tests on the session's Ray head as one unit of work (so on one worker, one after another),
    those with a cluster of their own as a second; every other test a unit of its own. (xdist's own
    `xdist_group` mark does this by renaming the node ids, which pytest 9.2 no longer lets a plugin
    do.) Registered only where pytest-xdist runs the session: its hook is unknown to a pytest
    without it (tests/gpu on the GPU machine)."""

    @staticmethod
    def pytest_xdist_make_scheduler(config, log):
        from xdist.scheduler import LoadScopeScheduling

        class Scheduling(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                if nodeid.split("::")[0] in OWN_CLUSTER:
                    return "own-cluster"
                return "ray" if _starts_ray(nodeid) else nodeid

        return Scheduling(config, log)


def pytest_configure(config):
    if getattr(config.option, "ray_together", False) and config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(RayTogether(), "collbench-ray-together")


def _starts_ray(nodeid: str) -> bool:
    path = nodeid.split("::")[0]
    return path.startswith(("tests/integration/", "tests/gpu/")) and path not in RAY_FREE


def pytest_collection_modifyitems(config, items):
    if _lab_tier(config):
        _shared_labs_together(items)
        return
    lab = [item for item in items if _is_lab(item)]
    if lab:
        items[:] = [item for item in items if not _is_lab(item)]
        config.hook.pytest_deselected(items=lab)


def _shared_labs_together(items) -> None:
    """The tests of one shared lab (tests/lab/conftest.py: Labs) run one after another, where the
    first of them ran, so the lab is built once, those that break it (`breaks_lab`) last; every other
    test keeps its place."""
    from tests.lab.conftest import shared_lab_of

    shapes = [shared_lab_of(item) for item in items]
    ordered, placed = [], set()
    for item, shape in zip(items, shapes):
        if shape is None:
            ordered.append(item)
        elif shape not in placed:
            placed.add(shape)
            mine = [other for other, s in zip(items, shapes) if s == shape]
            ordered += sorted(mine, key=lambda other: other.get_closest_marker("breaks_lab") is not None)
    items[:] = ordered


def pytest_report_header(config):
    if not _lab_tier(config):
        return "lab tier not selected (tests/lab/, tests marked `lab`): --lab or COLLBENCH_REQUIRE_LAB=1 runs it"
    return None
