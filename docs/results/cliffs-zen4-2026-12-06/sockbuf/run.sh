#!/bin/bash
# The loopback exchange and Loom over TCP (2 ranks, f32 sum all-reduce) at 1-8 MiB, with the
# socket buffers sized by the kernel (loopback SOCKBUF 0; Loom LOOM_SOCKBUF=0) and fixed at
# 512 KiB, 1 MiB and 4 MiB (Loom's default is 4 MiB: LOOM_SOCKBUF unset); 3 rounds, each setting
# in turn within a round.  usage: run.sh BUILD
B=$1
for round in 1 2 3; do
  for buf in 0 524288 1048576 4194304 default; do
    if [ $buf != default ]; then
      for s in 1048576 2097152 4194304 8388608; do
        echo "round $round sockbuf $buf $($B/bench/compare/loopback_footprint 2 $s $buf)"
      done
    fi
    if [ $buf = default ]; then E=(); else E=(LOOM_SOCKBUF=$buf); fi
    env "${E[@]}" LOOM_TRANSPORT=tcp timeout 120 $B/tools/loomrun --nproc-per-node 2 --no-prefix \
      $B/bench/loom-perf -o allreduce -b 1M -e 8M -f 2 -n 40 -w 5 --csv 2>/dev/null |
      grep -v "^#" | sed "s/^/round $round sockbuf $buf loom-perf,/"
  done
done
