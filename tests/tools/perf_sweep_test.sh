#!/usr/bin/env bash
# The exhaustive sweep (label slow): every op x dtype x reduction at several world sizes.
set -u
loomrun=$1 perf=$2
source "$(dirname "$0")/lib.sh"
failures=0
for np in 2 3 4 8; do
  for op in allreduce reducescatter allgather broadcast reduce; do
    for d in f32 f64 f16 bf16 i8 u8 i32 u32 i64 u64; do
      for r in sum prod min max avg; do
        if ! "$loomrun" --nproc-per-node $np "$perf" -o $op -d $d -r $r -b 1 -e 4M -f 4 -n 1 -w 0 --check --csv >"$dir/out" 2>&1; then
          echo "FAIL np=$np $op $d $r"; tail -5 "$dir/out"; failures=$((failures + 1))
        fi
      done
    done
  done
done
echo "sweep failures: $failures"
[ $failures = 0 ] || fail "$failures of the sweep's runs"
