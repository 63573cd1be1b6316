"""The NCCL path on real GPUs: device selection, event timing, exact results. Skipped without a GPU;
run by scripts/gpu_check.sh where one is present."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from tests.helpers import run_cli

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU with CUDA")]


def test_nccl_sweep_on_every_gpu(tmp_path):
    n = torch.cuda.device_count()
    out = tmp_path / "results"
    proc = run_cli(["run", "--backend", "nccl", "--dtypes", "float32,bfloat16,float16,int8", "-b", "1K", "-e", "64M",
                    "-f", "8", "-n", "10", "-w", "3", "-c", "2", "--output", str(out)], timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    df = pd.read_parquet(out)
    assert (df.status == "ok").all() and (df.n_wrong == 0).all()
    assert set(df.backend) == {"nccl"} and df.world_size.max() == n
    assert all(d.startswith("cuda:") for ds in df.devices for d in ds)
    assert (df.time_us > 0).all() and (df.busbw_gbps > 0).all()
