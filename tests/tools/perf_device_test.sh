#!/usr/bin/env bash
# loom-perf --device cuda: with a GPU (or the emulated runtime: EMULATED is ON), a checked
# all-reduce sweep on device buffers (2 ranks sharing GPU 0 through CUDA IPC directly, through
# the device slots, then staged through host memory); without one, a refusal that says why, and
# no run on host buffers in its place.
#   perf_device_test.sh LOOMRUN LOOM_PERF [EMULATED]
set -euo pipefail
loomrun=$1 perf=$2 emulated=${3:-OFF}
source "$(dirname "$0")/lib.sh"
out=""
on_failure() { echo "$out"; }
if [ -e /dev/nvidia0 ] || [ "$emulated" = ON ]; then
  for paths in "1 1" "1 0" "0 1"; do
    set -- $paths
    out=$(LOOM_CUDA_IPC=$1 LOOM_CUDA_DIRECT=$2 timeout 300 "$loomrun" --nproc-per-node 2 "$perf" \
      --device cuda -b 4 -e 64M -f 8 -n 5 -w 2 --check -d bf16 2>&1) ||
      fail "exit $? with LOOM_CUDA_IPC=$1 LOOM_CUDA_DIRECT=$2"
    grep -q "buffers in device 0" <<<"$out" || fail "the buffers are not on device 0"
    grep -q "out of bounds values : 0 OK" <<<"$out" ||
      fail "wrong results with LOOM_CUDA_IPC=$1 LOOM_CUDA_DIRECT=$2"
  done
  echo "loom-perf --device cuda: OK on $(echo "$out" | grep -o 'device 0 ([^)]*)' | head -1)"
  exit 0
fi
set +e
out=$(timeout 120 "$loomrun" --nproc-per-node 2 "$perf" --device cuda -b 8 -e 64 2>&1)
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "--device cuda ran without a GPU"
echo "$out" | grep -Eq "\-\-device cuda: (no usable GPU|no GPU visible|this build of loom-perf has no CUDA support)" ||
  fail "no reason given"
grep -q "size(B)" <<<"$out" && fail "a sweep ran on host buffers instead"
echo "loom-perf --device cuda without a GPU: refused, with the reason"
