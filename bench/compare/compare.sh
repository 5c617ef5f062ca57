#!/usr/bin/env bash
# Loom against Gloo (every algorithm), OpenMPI (vader and tcp) and PyTorch's gloo backend in one
# run: 2 and 4 ranks, shm and tcp, f32 sum all-reduce at 8 B and 64 KiB..64 MiB, all-to-all at
# 1 and 16 MiB per rank, 3 repetitions; one table per configuration with Loom's ratio to the best
# other library and the machine's memcpy and iperf3 limits.
#   bench/compare/compare.sh [--build DIR] [--reps 3] [--sizes "8 64K 1M"] [--kernels both]
#                            [--out DIR] ...      (--help: every option)
# --kernels avx2 runs Loom with its AVX-512 kernels disabled (LOOM_AVX512_DISABLE=1), both adds it
# as a column. Needs python3 (any); PyTorch from /usr/bin/python3 when installed.
exec python3 "$(dirname "$0")/compare.py" run "$@"
