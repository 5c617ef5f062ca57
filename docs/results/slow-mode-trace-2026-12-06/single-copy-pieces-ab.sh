#!/bin/bash
# The loom-perf of each build (before, after) copied to $AB_DIR/old and $AB_DIR/new first.
B=${B:-build-bench}
for r in $(seq 1 ${1:-5}); do
 for s in 16777216 67108864; do
  c2c=$($B/bench/compare/core_to_core 100 | cut -d, -f2)
  for v in old new; do
   for ip in "" "--inplace"; do
    t=$(LOOM_ALGO=allreduce:single_copy $B/tools/loomrun --no-prefix --nproc-per-node 2 ${AB_DIR:-/tmp/ab}/$v/loom-perf -b $s -e $s -n 20 -w 3 -c $ip --csv 2>&1 | grep "^$s," | cut -d, -f5,8)
    echo "round=$r size=$s c2c=$c2c $v inplace=${ip:+1} $t"
   done
  done
 done
done
