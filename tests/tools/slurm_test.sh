#!/usr/bin/env bash
# Slurm on the test bed: munged, slurmctld and one slurmd per node (tools/cluster/slurm.sh), then
# `srun -N 2 -n 4 --ntasks-per-node=2 loom-perf --check` and tools/slurm/allreduce_perf.sbatch
# through `sbatch --wait`. Every rank must read Slurm's environment and find the store on the
# step's first node; shm inside a node, tcp between. Needs root and Debian's slurmctld, slurmd,
# slurm-client and munge; exits 77 (CTest: skipped) with the reason otherwise.
set -u
build=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
cluster=$root/tools/cluster/cluster.sh slurm=$root/tools/cluster/slurm.sh
export LOOM_CLUSTER=s$(( $$ % 100000 ))
export LOOM_SECRET=slurm-test-$$ LOOM_TIMEOUT=120 LOOM_DEBUG=INFO
source "$(dirname "$0")/lib.sh"
cleanup() {
  timeout 60 "$slurm" down >/dev/null 2>&1
  timeout 60 "$cluster" down >/dev/null 2>&1
}
on_failure() { show_logs 30 "$dir"/*.log /run/loom-cluster/"$LOOM_CLUSTER"/slurm/*.log; }
need_test_bed slurmctld slurmd srun sbatch munged

timeout 60 "$cluster" up 2 >/dev/null || fail "cluster up"
timeout 120 "$slurm" up > "$dir/up.log" 2>&1 || fail "slurm up: $(cat "$dir/up.log")"
export SLURM_CONF
SLURM_CONF=$("$slurm" conf)

check() {
  local log=$1 what=$2
  grep -q "out of bounds values : 0 OK" "$log" || fail "$what: wrong results or no result"
  [ "$(grep -c "launched by slurm: rank [0-3]/4" "$log")" = 4 ] || fail "$what: not every rank read Slurm's environment"
  grep -q "store ${LOOM_CLUSTER}node1:" "$log" || fail "$what: the store is not on the step's first node"
  for r in 0 1; do grep -q "rank $r/4 on ${LOOM_CLUSTER}node1: shm to rank(s) $((1 - r)), tcp to rank(s) 2,3;" "$log" || fail "$what: rank $r's transports"; done
  for r in 2 3; do grep -q "rank $r/4 on ${LOOM_CLUSTER}node2: shm to rank(s) $((5 - r)), tcp to rank(s) 0,1;" "$log" || fail "$what: rank $r's transports"; done
}

timeout 180 "$cluster" exec 1 srun --immediate=30 -N 2 -n 4 --ntasks-per-node=2 \
  "$build/bench/loom-perf" -b 8 -e 4M -f 8 -n 2 -w 1 --check > "$dir/srun.log" 2>&1 || fail "srun failed"
check "$dir/srun.log" srun
echo "srun -N 2 -n 4: correct, Slurm environment read, store on the first node"

LOOM_PERF=$build/bench/loom-perf timeout 240 "$cluster" exec 1 sbatch --wait \
  -N 2 --ntasks-per-node=2 -o "$dir/sbatch.log" "$root/tools/slurm/allreduce_perf.sbatch" -e 4M -n 2 -w 1 \
  > "$dir/submit.log" 2>&1 || fail "sbatch job failed: $(cat "$dir/submit.log")"
check "$dir/sbatch.log" sbatch
echo "sbatch tools/slurm/allreduce_perf.sbatch: correct"
timeout 60 "$slurm" down >/dev/null || fail "slurm down"
timeout 60 "$cluster" down >/dev/null || fail "cluster down"
echo "slurm: all passed"
