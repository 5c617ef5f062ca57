#!/usr/bin/env bash
# The no-cliff check, run by hand: Loom's f32 sum all-reduce from 64 KiB to 64 MiB (x2 steps) for 2
# and 4 ranks on shm and tcp, every size in one launch per rank count and transport (adjacent
# sizes share their processes; --launch-per-size: each in fresh ones), 3 repetitions, with the
# memory bound (copy_footprint) measured at every size in every repetition, and over tcp the
# loopback exchange (loopback_footprint, with Loom's socket buffers). Judged against the machine:
# exits 1 where Loom's busbw divided by the memory bound at the same size falls more than 15% from
# one size to the next (the median of the repetitions' own changes); over tcp, where neither that
# fraction nor busbw divided by the loopback exchange keeps within 15% (harness/cliffs.py).
#   bench/check_cliffs.sh [--build DIR] [--ranks "2 4"] [--transports shm] [--min 64K]
#                         [--max 64M] [--reps 3] [--threshold 0.15] [--kernels avx2] [--out DIR]
exec python3 "$(dirname "$0")/compare/compare.py" cliffs "$@"
