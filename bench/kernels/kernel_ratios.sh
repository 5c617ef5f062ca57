#!/usr/bin/env bash
# The kernels against this machine's memory limit, as ratios measured in one run: median
# bytes/s over repetitions (benchmarks interleaved at random, so drift hits all alike).
#   bench/kernels/kernel_ratios.sh [BUILD_DIR] [REPETITIONS]
set -euo pipefail
build=${1:-build} reps=${2:-5}
bench=$build/bench/kernels_bench
[ -x "$bench" ] || { echo "kernels_bench not built (install libbenchmark-dev and reconfigure)"; exit 1; }
csv=$("$bench" --benchmark_repetitions="$reps" --benchmark_report_aggregates_only=true \
  --benchmark_enable_random_interleaving=true --benchmark_min_time=0.2 --benchmark_format=csv 2>/dev/null)
echo "$csv" | awk -F, '
  $1 ~ /_median"?$/ {
    name = $1; gsub(/"/, "", name); sub(/_median$/, "", name); sub(/\/real_time$/, "", name)
    bw[name] = $6 / 1e9; label = $8; gsub(/"/, "", label); if (label != "") target = label
  }
  END {
    big = "/67108864"; small = "/262144"; limit = bw["limit/f32" big]
    printf "SIMD target: %s; 64 MiB arrays unless noted; GB/s = (2 reads + 1 write) / time\n", target
    printf "%-44s %9s %10s %s\n", "kernel", "GB/s", "x limit", "target"
    printf "%-44s %9.2f %10.2f %s\n", "limit: plain c=a+b f32 -O3 native", limit, 1, ""
    printf "%-44s %9.2f %10.2f %s\n", "plain c=a+b f64", bw["limit/f64" big], bw["limit/f64" big] / limit, ""
    printf "%-44s %9.2f %10.2f %s\n", "plain c=a+b i32", bw["limit/i32" big], bw["limit/i32" big] / limit, ""
    n = split("f32 0.9,f64 0.9,i32 0.9,f16 0.7,bf16 0.7,i8 -", rows, ",")
    for (i = 1; i <= n; i++) {
      split(rows[i], r, " ")
      for (v = 0; v < 2; v++) {
        key = "loom/" r[1] (v ? "/cached-stores" : "") big
        goal = (v || r[2] == "-") ? "" : sprintf(">= %.1f", r[2])
        printf "%-44s %9.2f %10.2f %s\n", "loom sum " r[1] (v ? " (no non-temporal stores)" : ""), bw[key], bw[key] / limit, goal
      }
    }
    ls = bw["loom/f32" small]; rs = bw["reference/f32" small]
    printf "256 KiB (in cache): loom f32 sum %.1f GB/s, scalar reference %.1f GB/s: %.1fx (target >= 3)\n", ls, rs, ls / rs
  }'
