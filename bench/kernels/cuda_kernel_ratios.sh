#!/usr/bin/env bash
# The CUDA kernels against a device-to-device cudaMemcpy measured in the same run: median
# bandwidth (bytes moved / time) over repetitions, interleaved at random.
#   bench/kernels/cuda_kernel_ratios.sh [BUILD_DIR] [REPETITIONS]
# Targets (issue: CUDA): f32 sum >= 0.85 of the copy at 1 GiB, bf16 >= 0.80.
set -euo pipefail
build=${1:-build} reps=${2:-5}
bench=$build/bench/cuda_kernels_bench
[ -x "$bench" ] || { echo "cuda_kernels_bench not built (needs CUDA and libbenchmark-dev)"; exit 1; }
csv=$("$bench" --benchmark_repetitions="$reps" --benchmark_report_aggregates_only=true \
  --benchmark_enable_random_interleaving=true --benchmark_format=csv 2>/dev/null)
echo "$csv" | awk -F, '
  /error_occurred/ { next }
  $1 ~ /_median"?$/ {
    name = $1; gsub(/"/, "", name); sub(/_median$/, "", name); sub(/\/manual_time$/, "", name)
    bw[name] = $6 / 1e9; seen++
  }
  END {
    if (seen == 0) { print "no results (no GPU visible?)"; exit 1 }
    for (size_i = 0; size_i < 2; size_i++) {
      size = size_i ? "1073741824" : "67108864"; label = size_i ? "1 GiB" : "64 MiB"
      copy = bw["copy_d2d/" size]
      printf "%s arrays: device-to-device cudaMemcpy %.1f GB/s (read + write)\n", label, copy
      printf "  %-22s %9s %10s %s\n", "kernel", "GB/s", "x copy", "target"
      n = split("reduce_sum/f32 0.85,reduce_sum/bf16 0.80,reduce_sum/f16 -,reduce_sum/f64 -,reduce_sum/i32 -,reduce_sum/i8 -,reduce_max/f32 -", rows, ",")
      for (i = 1; i <= n; i++) {
        split(rows[i], r, " ")
        v = bw[r[1] "/" size]
        goal = (r[2] == "-" || size_i == 0) ? "" : ">= " r[2]
        printf "  %-22s %9.1f %10.3f %s\n", r[1], v, (copy > 0 ? v / copy : 0), goal
      }
    }
  }'
