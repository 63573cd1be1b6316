#!/usr/bin/env bash
# One short GPU check (under 8 minutes): install, run the GPU tests, run a small NCCL sweep on every
# GPU of this machine, and print the figures (device, NCCL version, busbw per size).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
python3 -m pip install -q -e '.[test]' 2>&1 | grep -v "already satisfied" || true
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count())"
timeout 300 python3 -m pytest -q tests/gpu
out=$(mktemp -d)
timeout 240 python3 -m orchestrator run --backend nccl --collectives all_reduce,all_gather,reduce_scatter,send_recv \
    --dtypes bfloat16 -b 1K -e 1G -f 4 -n 20 -w 5 -c 1 --output "$out"
python3 -m orchestrator report "$out" || true
python3 - "$out" <<'PY'
import sys
import pandas as pd
df = pd.read_parquet(sys.argv[1])
runs = pd.read_parquet(sys.argv[1] + "/_runs")
print("devices:", runs.device_models.iloc[0], "nccl:", runs.nccl_version.iloc[0])
print(df.pivot_table(index="msg_bytes", columns="collective", values="busbw_gbps").round(2).to_string())
PY
