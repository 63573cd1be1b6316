#!/usr/bin/env bash
# The GPU check, in one call (under 10 minutes): install, run tests/gpu, run an NCCL sweep on every
# GPU of this machine, and print one verdict line (scripts/gpu_verdict.py): exact results, NCCL's
# transport account, and a busbw floor for known 8-GPU parts. Exit 0 only when everything passed.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
python3 -m pip install -q -e '.[test]' 2>&1 | grep -v "already satisfied" || true
nvidia-smi --query-gpu=name,memory.total,compute_cap,driver_version --format=csv
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl (built with)', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count())"
# COLLBENCH_REQUIRE_GPU=1: tests/gpu fail, not skip, where no GPU is found (tests/gpu/gate.py); they
# fail anyway with the reason where nvidia-smi sees a GPU that torch cannot use (e.g. an old driver).
COLLBENCH_REQUIRE_GPU=1 timeout 360 python3 -m pytest -q -rs -p no:cacheprovider tests/gpu; tests_rc=$?
out=$(mktemp -d)
timeout 200 python3 -m orchestrator run --backend nccl --collectives all_reduce,all_gather,reduce_scatter,send_recv \
    --dtypes bfloat16 -b 1K -e 1G -f 8 -n 20 -w 5 -c 1 --patterns intra --output "$out"; run_rc=$?
python3 -m orchestrator report "$out" --threshold 0.99 || true
python3 - "$out" <<'PY'
import sys
import pandas as pd
df = pd.read_parquet(sys.argv[1])
cols = ["collective", "world_size", "msg_bytes", "time_us", "time_us_batch", "busbw_gbps", "busbw_gbps_batch",
        "nccl_version", "intra_transport"]
print(df[df.world_size == df.world_size.max()][cols].to_string(index=False))
PY
python3 scripts/gpu_verdict.py "$out"; verdict_rc=$?
echo "tests/gpu exit $tests_rc, sweep exit $run_rc, verdict exit $verdict_rc"
[ "$tests_rc" -eq 0 ] && [ "$run_rc" -eq 0 ] && [ "$verdict_rc" -eq 0 ]
