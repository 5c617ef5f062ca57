#!/bin/bash
# The same size in consecutive launches, as the cliff check's per-size launches: $1 ranks $2 size $3 launches $4 reps
B=${BUILD:-build}; R=$1; S=$2
N=$(( 512*1048576/S )); [ $N -gt 400 ] && N=400; [ $N -lt 5 ] && N=5
for rep in $(seq 1 $4); do
  line="rep $rep:"
  for l in $(seq 1 $3); do
    t=$(LOOM_TRANSPORT=tcp $B/tools/loomrun --nproc-per-node $R --no-prefix $B/bench/loom-perf -o allreduce -b $S -e $S -n $N -w $((N/10+1)) --csv 2>/dev/null | tail -1 | cut -d, -f7)
    line="$line $t"
  done
  echo "$line"
done
