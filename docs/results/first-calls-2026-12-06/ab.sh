#!/bin/bash
# The A/B behind this folder: launches alternating the library before (BASE, a build of 2e1d2e7
# with bench/first_calls added) and after (NEW), 4 ranks over shm, pairwise forced, 16 calls at
# each of 64 KiB, 256 KiB and 1 MiB blocks. usage: ab.sh BASE_BUILD NEW_BUILD REPS
for r in $(seq "$3"); do
  for v in base new; do
    if [ $v = base ]; then B=$1; else B=$2; fi
    LOOM_ALGO=alltoall:pairwise timeout 120 "$B/tools/loomrun" --nproc-per-node 4 \
      "$B/bench/first_calls" 16 64 256 1024 > "$r-$v.txt" 2>&1
  done
done
