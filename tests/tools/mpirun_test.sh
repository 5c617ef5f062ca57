#!/usr/bin/env bash
# mpirun on this host: every rank reads Open MPI's environment (MASTER_ADDR given) or a
# file:// store, and the job checks out. Exits 77 (CTest: skipped) without mpirun.
set -u
perf=$1
source "$(dirname "$0")/lib.sh"
command -v mpirun >/dev/null || skip "mpirun (openmpi-bin) is not installed"
mpi=(mpirun --allow-run-as-root --oversubscribe -np 4 --mca btl self,tcp -x LOOM_DEBUG=INFO)
"${mpi[@]}" -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$(free_port)" \
  "$perf" -b 8 -e 1M -f 32 -n 2 -w 1 --check > "$dir/env.log" 2>&1 ||
  { cat "$dir/env.log"; fail "mpirun with MASTER_ADDR"; }
grep -q "out of bounds values : 0 OK" "$dir/env.log" || { cat "$dir/env.log"; fail "wrong results"; }
[ "$(grep -c "launched by openmpi: rank [0-3]/4, local rank [0-3]/4" "$dir/env.log")" = 4 ] ||
  { cat "$dir/env.log"; fail "not every rank read Open MPI's environment"; }
"${mpi[@]}" -x LOOM_INIT_METHOD="file://$dir/store" "$perf" -b 8 -e 64K -f 32 -n 2 -w 1 --check \
  > "$dir/file.log" 2>&1 || { cat "$dir/file.log"; fail "mpirun with a file:// store"; }
grep -q "out of bounds values : 0 OK" "$dir/file.log" || { cat "$dir/file.log"; fail "wrong results"; }
# Without an address there is nothing to meet at: a clear error, not a hang.
if "${mpi[@]}" "$perf" -b 8 -e 8 -n 1 -w 0 > "$dir/none.log" 2>&1; then
  cat "$dir/none.log"; fail "no MASTER_ADDR, yet the job ran"
fi
grep -q "MASTER_ADDR is not set" "$dir/none.log" || { cat "$dir/none.log"; fail "the error does not name MASTER_ADDR"; }
echo "mpirun: env:// and file:// launches correct; a missing MASTER_ADDR is named"
