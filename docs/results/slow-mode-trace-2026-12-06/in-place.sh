#!/bin/bash
B=${B:-build-bench}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
for r in $(seq 1 ${1:-4}); do
 for s in 1048576 16777216 67108864; do
  n=$([ $s = 1048576 ] && echo 500 || echo 20)
  c2c=$($B/bench/compare/core_to_core 100 | cut -d, -f2)
  for a in auto ring single_copy; do
    t=$(LOOM_DEBUG=INFO LOOM_ALGO=$([ $a = auto ] || echo allreduce:$a) $B/tools/loomrun --no-prefix --nproc-per-node 2 $B/bench/loom-perf -b $s -e $s -n $n -w 3 -c --inplace --csv 2>&1)
    ch=$(grep -o "rank 0/2 info: all_reduce: [a-z_]* for" <<<"$t" | tail -1 | awk '{print $5}')
    echo "round=$r size=$s c2c=$c2c $a chose=$ch inplace $(grep "^$s," <<<"$t" | cut -d, -f5,8)"
  done
  echo "round=$r size=$s c2c=$c2c vader $(mpirun -np 2 --mca pml ob1 --mca btl self,vader $B/bench/compare/mpi_bench allreduce $s $n 3 2>&1 | tail -1 | cut -d, -f5)"
 done
done
