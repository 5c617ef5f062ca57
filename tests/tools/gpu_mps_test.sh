#!/usr/bin/env bash
# The GPU tests again with the MPS daemon running (processes sharing a GPU then run kernels at
# the same time instead of in time slices). Skips (77) without a GPU or without MPS's control
# program; stops the daemon it started whatever happens.
#   gpu_mps_test.sh GPU_TESTS
set -u
gpu_tests=$1
source "$(dirname "$0")/lib.sh"
[ -e /dev/nvidia0 ] || skip "no NVIDIA GPU (/dev/nvidia0 absent)"
command -v nvidia-cuda-mps-control >/dev/null || skip "nvidia-cuda-mps-control not found"
export CUDA_MPS_PIPE_DIRECTORY=$dir/pipe CUDA_MPS_LOG_DIRECTORY=$dir/log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
cleanup() { echo quit | nvidia-cuda-mps-control >/dev/null 2>&1; }
nvidia-cuda-mps-control -d || skip "the MPS daemon did not start"
"$gpu_tests"
