#!/bin/bash
# Alternating forced algorithms over tcp (or $T). $1 ranks $2 size $3 rounds; specs in $ALGS (model or alg@slice)
B=${BUILD:-build}; R=$1; S=$2
N=$(( 512*1048576/S )); [ $N -gt 60 ] && N=60; [ $N -lt 6 ] && N=6
for r in $(seq 1 $3); do
  line="R=$R S=$S"
  for a in ${ALGS:-model}; do
    spec=""; [ "$a" != model ] && spec="allreduce:$a"
    t=$(LOOM_ALGO=$spec LOOM_TRANSPORT=${T:-tcp} $B/tools/loomrun --nproc-per-node $R --no-prefix $B/bench/loom-perf -o allreduce -b $S -e $S -n $N -w 2 --csv 2>/dev/null | tail -1 | cut -d, -f7)
    line="$line $a=$t"
  done
  echo "$line"
done
