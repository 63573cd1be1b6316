#!/usr/bin/env bash
# The GPU check, in one call (at most 8 minutes: the timeouts below add up to 480 s): install, run
# tests/gpu, run NCCL sweeps on every GPU of this machine (every collective and dtype it has, the
# overlap workload, a CUDA-graph batch), a recorded job's collectives replayed over NCCL, the report, and one verdict line (scripts/gpu_verdict.py):
# exact results, NCCL's version and transport columns on every row, each size's GPU memory against
# its estimate, batch against per-call timing and the empty-call floor, and a busbw floor for known
# 8-GPU NVLink parts. Exit 0 only when everything passed.
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
    timeout 90 scripts/install_bundle.sh "$bundle" "$private/venv"; install_rc=$?
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
# Each test's own timeouts add up to less than this one, so a hang is named by its test.
COLLBENCH_REQUIRE_GPU=1 timeout 185 python3 -m pytest -q -rs -p no:cacheprovider tests/gpu; tests_rc=$?
out=$(mktemp -d)
results="$out/results"
common=(--backend nccl --patterns intra -w 5 -c 1 --output "$results")
# Every collective and every dtype the GPUs have (`-d all`: float8 on compute capability 9.0+, left
# out with a note below it), out of place and in place, 1K to 256M.
timeout 95 python3 -m orchestrator run "${common[@]}" --collectives all_reduce,all_gather,reduce_scatter,all_to_all,broadcast,reduce,send_recv \
    -d all -b 1K -e 256M -f 16 -n 20; sweep_rc=$?
# The overlap workload (all_reduce beside a matmul), and nccl-tests' -G: the batch in a CUDA graph.
timeout 30 python3 -m orchestrator run "${common[@]}" --collectives overlap --dtypes bfloat16 -b 16M -e 256M -f 4 -n 10
overlap_rc=$?
timeout 30 python3 -m orchestrator run "${common[@]}" --collectives all_reduce --dtypes bfloat16 --cuda-graph \
    -b 1K -e 64M -f 8 -n 20; graph_rc=$?
# A recorded job's collectives replayed over NCCL (tests/fixtures/flight_recorder: TP x DP on 4 GPUs,
# else DDP on 2): its process groups made on the GPUs, its ops on device buffers, CUDA-event timing.
gpus=$(python3 -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
replay_rc=0
if [ "$gpus" -ge 2 ]; then
    trace=tests/fixtures/flight_recorder/$([ "$gpus" -ge 4 ] && echo tp_dp || echo ddp)
    timeout 25 python3 -m orchestrator replay "$trace" --backend nccl --repeat 2 --output "$out/replay"; replay_rc=$?
fi
run_rc=$((sweep_rc | overlap_rc | graph_rc | replay_rc))
timeout 10 python3 -m orchestrator report "$results" --threshold 0.99; report_rc=$?  # 1: flags, read them
[ "$report_rc" -le 1 ] || run_rc=$((run_rc | report_rc))
timeout 5 python3 - "$results" <<'PY'
import sys
from orchestrator.results import dataset
df = dataset.load(sys.argv[1], latest=False)
cols = ["collective", "dtype", "world_size", "msg_bytes", "time_us", "time_us_batch", "busbw_gbps", "busbw_gbps_batch",
        "mem_peak_bytes", "mem_estimate_bytes", "nccl_version", "intra_transport"]
big = df[(df.world_size == df.world_size.max()) & (df.dtype == "bfloat16") & (df.collective == "all_reduce")]
print(big[cols].to_string(index=False))
PY
timeout 10 python3 scripts/gpu_verdict.py "$results"; verdict_rc=$?
echo "tests/gpu exit $tests_rc, sweeps exit $sweep_rc/$overlap_rc/$graph_rc, replay exit $replay_rc, report exit $report_rc, verdict exit $verdict_rc"
[ "$tests_rc" -eq 0 ] && [ "$run_rc" -eq 0 ] && [ "$verdict_rc" -eq 0 ]
