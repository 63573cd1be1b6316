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
