#!/bin/bash
B=${B:-build-bench}
for r in $(seq 1 ${1:-3}); do
 for s in 4194304 16777216 67108864; do
  c2c=$($B/bench/compare/core_to_core 100 | cut -d, -f2)
  for a in auto ring single_copy; do
    t=$(LOOM_DEBUG=INFO LOOM_ALGO=$([ $a = auto ] || echo allreduce:$a) $B/tools/loomrun --no-prefix --nproc-per-node ${NP:-4} $B/bench/loom-perf -b $s -e $s -n 10 -w 2 -c --inplace --csv 2>&1)
    ch=$(grep -o "rank 0/[0-9] info: all_reduce: [a-z_]* for $s" <<<"$t" | tail -1 | awk '{print $5}')
    echo "np=${NP:-4} round=$r size=$s c2c=$c2c $a chose=$ch inplace $(grep "^$s," <<<"$t" | cut -d, -f5,8)"
  done
 done
done
