#!/bin/bash
# alternate shift vs xor pairwise, fresh launches
cd "$(git rev-parse --show-toplevel)"
reps=${REPS:-6}
for rep in $(seq $reps); do
 for v in shift xor; do
  for size in 1M 2M 16M; do
   if [ $v = xor ]; then e="LOOM_A2A_XOR=1"; else e="LOOM_A2A_NONE=1"; fi
   it=100; w=30; [ $size = 16M ] && it=40 && w=5
   t=$(env $e LOOM_ALGO=alltoall:pairwise LOOM_TRANSPORT=shm timeout 120 build/tools/loomrun --nproc-per-node 4 build/bench/loom-perf -o alltoall -b $size -e $size -n $it -w $w --csv 2>/dev/null | grep -E '^\[0\] [0-9]' | sed 's/^\[0\] //' | awk -F, '{print $5, $7}')
   echo "$rep $v $size $t"
  done
 done
done
