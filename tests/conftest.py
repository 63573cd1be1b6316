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
