#!/usr/bin/env bash
# What can be checked of the CUDA kernels without a GPU, from the compiler's output for sm_90:
# no register spills in any kernel, and every element-wise kernel (every type with every
# reduction, and divide) moves 16-byte vectors in its main loop (at least four loads per input
# and four stores: the unrolled loop).
#   cuda_kernel_check.sh NVCC SOURCE_DIR
set -euo pipefail
nvcc=$1 src=$2
source "$(dirname "$0")/lib.sh"
tmp=$dir
flags=(-std=c++20 -O3 -arch=sm_90 -I"$src/include")

"$nvcc" "${flags[@]}" -Xptxas -v -c "$src/kernels/cuda/reduce.cu" -o "$tmp/reduce.o" 2>"$tmp/ptxas.txt"
kernels=$(grep -c "spill stores" "$tmp/ptxas.txt")
spilling=$(grep "spill stores" "$tmp/ptxas.txt" | grep -vc "0 bytes spill stores, 0 bytes spill loads" || true)
[ "$kernels" -ge 50 ] || fail "ptxas reported $kernels kernels, expected 50 or more"
[ "$spilling" -eq 0 ] || { grep -B1 "spill" "$tmp/ptxas.txt" | grep -v " 0 bytes spill"; fail "$spilling kernel(s) spill registers"; }

"$nvcc" "${flags[@]}" --ptx "$src/kernels/cuda/reduce.cu" -o "$tmp/reduce.ptx"
awk '
  /^\.visible \.entry|^\.entry/ {
    name = $0; mapped = name ~ /map_kernel/
    if (mapped) { loads[name] = 0; stores[name] = 0 }
  }
  mapped && /ld\.global\.v[24]\./ { loads[name]++ }
  mapped && /st\.global\.v[24]\./ { stores[name]++ }
  END {
    n = 0; bad = 0
    for (k in loads) {
      n++
      need = k ~ /DivideFn/ ? 4 : 8  # divide reads one input
      if (loads[k] < need || stores[k] < 4) { bad++; print "not vectorised: " substr(k, 1, 140) " (" loads[k] " vector loads, " stores[k] " vector stores)" }
    }
    if (n < 60) { print "FAIL: found " n " element-wise kernels, expected 60 (10 types x (5 reductions + divide))"; exit 1 }
    if (bad) { print "FAIL: " bad " kernel(s) without 16-byte vector loads and stores"; exit 1 }
    print "cuda kernels: " n " element-wise kernels, all with 16-byte vector loads and stores"
  }' "$tmp/reduce.ptx"
echo "cuda kernels: $kernels kernels, no register spills"
