#!/usr/bin/env bash
# The GPU check, in one call, within 6 minutes: install, one Ray instance, an NCCL sweep of every
# collective and dtype on every GPU, tests/gpu on its rows, overlap, a CUDA-graph batch and a replay
# (two GPUs or more), the report, and one verdict line that names what was not exercised.
#
#     bash scripts/gpu_check.sh --prepare       (here: a fresh bundle, and the call to make)
#     bash scripts/gpu_check.sh [--bundle DIR] [--evidence DIR] [--rehearse] [--budget 6m]
#
# It runs on the first python3 on PATH (on the GPU machine, /opt/torch/.venv/bin's: the prepared
# call puts it first). The steps, their timeouts and the options: --help (scripts/gpu_check.py,
# standard library only: it runs before anything is installed); docs/GPU.md: the prepared call.
set -uo pipefail
cd "$(dirname "$0")/.."
command -v python3 >/dev/null || { echo "gpu_check: error: no python3 on PATH" >&2; exit 2; }
exec python3 scripts/gpu_check.py "$@"
