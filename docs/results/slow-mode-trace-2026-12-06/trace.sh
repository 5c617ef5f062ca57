#!/bin/bash
# One round: the cache-line round trip, then Loom (ring, single copy) and vader, 2 ranks shm,
# 1 / 16 / 64 MiB, each a fresh launch; Loom at DEBUG for its copies' breakdown.
B=${B:-build-bench}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
rounds=${1:-6}
for r in $(seq 1 $rounds); do
  for s in 1048576 16777216 67108864; do
    n=$([ $s = 1048576 ] && echo 1000 || echo 20)
    c2c=$($B/bench/compare/core_to_core 200 | cut -d, -f2)
    for a in ring single_copy; do
      out=$(LOOM_ALGO=allreduce:$a LOOM_DEBUG=DEBUG $B/tools/loomrun --no-prefix --nproc-per-node 2 $B/bench/loom-perf -b $s -e $s -n $n -w 3 --csv 2>&1)
      t=$(grep "^$s," <<<"$out" | cut -d, -f5)
      pipe=$(grep -o "pipe_gbps=[0-9.]*" <<<"$out" | head -1 | cut -d= -f2)
      work=$(grep "rank 0/2 debug: all_reduce $a of" <<<"$out" | tail -1 | sed 's/.*waiting for peers \([0-9.]*\) us.*reductions: \(.*\); cost model.*/wait \1 us; \2/')
      echo "round=$r size=$s c2c_ns=$c2c lib=loom-$a us=$t pipe_gbps=$pipe | $work"
    done
    v=$(mpirun -np 2 --mca pml ob1 --mca btl self,vader $B/bench/compare/mpi_bench allreduce $s $n 3 2>&1 | tail -1 | cut -d, -f5)
    echo "round=$r size=$s c2c_ns=$c2c lib=vader us=$v"
  done
done
