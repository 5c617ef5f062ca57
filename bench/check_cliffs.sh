#!/usr/bin/env bash
# The no-cliff check, run by hand: Loom's f32 sum all-reduce from 64 KiB to 256 MiB (x2 steps)
# for 2, 3, 4 and 8 ranks on shm and tcp, every size in one launch per rank count and transport
# (adjacent sizes share their processes; --launch-per-size: each in fresh ones), 3 repetitions;
# flags every size whose busbw is more than 10% below the next smaller size's (the median of the
# repetitions' ratios),
# beside the memory bound (copy_footprint) at the same sizes. Exits 1 when a fall is not the
# memory's: over shm, deeper than the bound's own fall at the same step; over tcp, any.
#   bench/check_cliffs.sh [--build DIR] [--ranks "2 4"] [--transports shm] [--min 64K]
#                         [--max 256M] [--reps 3] [--threshold 0.1] [--kernels avx2] [--out DIR]
exec python3 "$(dirname "$0")/compare/compare.py" cliffs "$@"
