#!/usr/bin/env bash
# The GPU check, in one call (under 10 minutes): install, run tests/gpu, run an NCCL sweep on every
# GPU of this machine, and print one verdict line (scripts/gpu_verdict.py): exact results, NCCL's
# transport account, and a busbw floor for known 8-GPU parts. Exit 0 only when everything passed.
#
#     scripts/gpu_check.sh [--bundle DIR]
#
# --bundle DIR: a machine without a package registry installs collbench from an offline bundle
# (scripts/offline_bundle.sh) with no network, into a private virtual environment that sees the
# image's own torch (scripts/install_bundle.sh). Without it, pip installs this checkout.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
usage="usage: gpu_check.sh [--bundle DIR]"
case "$#:${1:-}" in
    0:) bundle="" ;;
    2:--bundle) bundle=$2 ;;
    *:--bundle) echo "gpu_check: error: --bundle needs one folder ($usage)" >&2; exit 2 ;;
    *) echo "gpu_check: error: unknown argument '$1' ($usage)" >&2; exit 2 ;;
esac
if [ -n "$bundle" ]; then
    private=$(mktemp -d)
    trap 'rm -rf "$private"' EXIT
    timeout 240 scripts/install_bundle.sh "$bundle" "$private/venv"; install_rc=$?
    # exit 2: install_bundle.sh has named the bad argument in its one line
    [ "$install_rc" -eq 0 ] || [ "$install_rc" -eq 2 ] || echo "gpu_check: installing $bundle failed" >&2
    [ "$install_rc" -eq 0 ] || exit "$install_rc"
    export PATH="$private/venv/bin:$PATH"  # python3 below is the private environment's
else
    python3 -m pip install -q -e '.[test]' 2>&1 | grep -v "already satisfied" || true
fi
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
