import os

import pytest

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


def pytest_collection_modifyitems(config, items):
    if _lab_tier(config):
        _shared_labs_together(items)
        return
    lab = [item for item in items if _is_lab(item)]
    if lab:
        items[:] = [item for item in items if not _is_lab(item)]
        config.hook.pytest_deselected(items=lab)


def _shared_labs_together(items) -> None:
    """The tests of one shared lab shape (tests/lab/conftest.py: Labs) run one after another, where
    the first of them ran, so the lab is built once; every other test keeps its place."""
    from tests.lab.conftest import shared_lab_of

    shapes = [shared_lab_of(item) for item in items]
    ordered, placed = [], set()
    for item, shape in zip(items, shapes):
        if shape is None:
            ordered.append(item)
        elif shape not in placed:
            placed.add(shape)
            ordered += [other for other, s in zip(items, shapes) if s == shape]
    items[:] = ordered


def pytest_report_header(config):
    if not _lab_tier(config):
        return "lab tier not selected (tests/lab/, tests marked `lab`): --lab or COLLBENCH_REQUIRE_LAB=1 runs it"
    return None
