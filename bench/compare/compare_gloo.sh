#!/usr/bin/env bash
# Loom vs Gloo, 2 ranks, both over TCP loopback, f32 sum all-reduce: busbw at 64 MiB and latency at
# 8 bytes. Every Gloo algorithm runs in fresh processes; each round measures everything once and
# prints the ratios against the best Gloo algorithm of that round.
#   bench/compare/compare_gloo.sh [BUILD_DIR] [ROUNDS]
set -euo pipefail
build=${1:-build} rounds=${2:-3}
loomrun=$build/tools/loomrun perf=$build/bench/loom-perf gloo=$build/bench/compare/gloo_allreduce
[ -x "$gloo" ] || { echo "gloo_allreduce not built (install libgloo-dev and reconfigure)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
big=$((64 << 20))

loom_row() {  # bytes iters warmup -> "time_us busbw"
  LOOM_TRANSPORT=tcp "$loomrun" --nproc-per-node 2 "$perf" -b "$1" -e "$1" -n "$2" -w "$3" --csv 2>/dev/null \
    | grep -v '^\[1\]' | sed 's/^\[0\] //' | awk -F, 'NR==2 {print $5, $7}'
}
gloo_row() {  # algo bytes iters warmup -> "time_us busbw"
  rm -rf "$tmp/store" && mkdir -p "$tmp/store"
  "$loomrun" --nproc-per-node 2 --no-prefix "$gloo" --store "$tmp/store" --algo "$1" --bytes "$2" -n "$3" -w "$4" \
    2>/dev/null | awk -F, '{print $3, $4}' | head -1
}

printf "%-5s %-18s %14s %14s\n" round impl "64MiB busbw" "8B time(us)"
for round in $(seq 1 "$rounds"); do
  read -r _ loom_bw < <(loom_row $big 30 3)
  read -r loom_lat _ < <(loom_row 8 2000 200)
  printf "%-5s %-18s %14.3f %14.1f\n" "$round" loom "$loom_bw" "$loom_lat"
  best_bw=0 best_lat=1e30
  for algo in ring_chunked halving_doubling bcube allreduce_ring; do
    read -r _ bw < <(gloo_row $algo $big 30 3)
    read -r lat _ < <(gloo_row $algo 8 2000 200)
    printf "%-5s %-18s %14.3f %14.1f\n" "$round" "gloo:$algo" "$bw" "$lat"
    best_bw=$(awk -v a="$best_bw" -v b="$bw" 'BEGIN {print (b > a) ? b : a}')
    best_lat=$(awk -v a="$best_lat" -v b="$lat" 'BEGIN {print (b < a) ? b : a}')
  done
  awk -v lb="$loom_bw" -v gb="$best_bw" -v ll="$loom_lat" -v gl="$best_lat" -v r="$round" \
    'BEGIN {printf "round %s: busbw ratio loom/best-gloo at 64 MiB = %.2f   8 B latency ratio loom/best-gloo = %.2f\n", r, lb/gb, ll/gl}'
done
