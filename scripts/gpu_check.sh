#!/usr/bin/env bash
# The GPU check, in one call, within 6 minutes: install, one Ray instance, an NCCL sweep of every
# collective and dtype on every GPU, tests/gpu on its rows, overlap, a CUDA-graph batch and a replay
# (two GPUs or more), the report, and one verdict line that names what was not exercised.
#
#     bash scripts/gpu_check.sh [--bundle DIR] [--evidence DIR] [--rehearse] [--budget 6m]
#
# The steps, their timeouts and the options: scripts/gpu_check.py (standard library only: it runs on
# the image's own python3 before anything is installed); docs/GPU.md: the command for the GPU machine.
set -uo pipefail
cd "$(dirname "$0")/.."
command -v python3 >/dev/null || { echo "gpu_check: error: no python3 on PATH" >&2; exit 2; }
exec python3 scripts/gpu_check.py "$@"
