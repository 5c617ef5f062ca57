#!/usr/bin/env bash
# Loom (shared memory) vs OpenMPI's vader BTL on one host, f32 sum all-reduce, and both against
# this machine's single-thread memcpy bandwidth. Each round measures everything once and prints
# the ratios of that round.
#   bench/compare/compare_mpi.sh [BUILD_DIR] [ROUNDS]
set -euo pipefail
build=${1:-build} rounds=${2:-3}
loomrun=$build/tools/loomrun perf=$build/bench/loom-perf
mpi=$build/bench/compare/mpi_allreduce memcpy=$build/bench/compare/memcpy_bandwidth
[ -x "$mpi" ] || { echo "mpi_allreduce not built (install libopenmpi-dev and reconfigure)"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

loom_row() {  # ranks bytes iters -> "time_us busbw"
  "$loomrun" --nproc-per-node "$1" "$perf" -b "$2" -e "$2" -n "$3" -w 3 --csv 2>/dev/null \
    | grep '^\[0\] [0-9]' | sed 's/^\[0\] //' | awk -F, '{print $5, $7}'
}
mpi_row() {  # ranks bytes iters -> "time_us busbw"
  mpirun --oversubscribe -np "$1" --mca btl self,vader "$mpi" "$2" "$3" 3 2>/dev/null | awk -F, '{print $3, $4}'
}

for round in $(seq 1 "$rounds"); do
  copy=$("$memcpy" $((64 << 20)) 20 | cut -d, -f3)
  echo "round $round: single-thread memcpy $copy GB/s"
  for spec in "2 67108864 20" "2 16777216 50" "2 1048576 500" "2 8 100000" "4 16777216 30"; do
    read -r np bytes iters <<<"$spec"
    read -r lt lb < <(loom_row "$np" "$bytes" "$iters")
    read -r mt mb < <(mpi_row "$np" "$bytes" "$iters")
    if [ "$bytes" = 8 ]; then
      awk -v np="$np" -v lt="$lt" -v mt="$mt" 'BEGIN {printf "  %d ranks      8 B: loom %8.2f us  vader %8.2f us  latency ratio loom/vader %.2f\n", np, lt, mt, lt/mt}'
    else
      awk -v np="$np" -v b="$bytes" -v lb="$lb" -v mb="$mb" -v c="$copy" 'BEGIN {printf "  %d ranks %8.0f KiB: loom %6.3f GB/s  vader %6.3f GB/s  busbw ratio loom/vader %.2f  loom/memcpy %.2f\n", np, b/1024, lb, mb, lb/mb, lb/c}'
    fi
  done
done
