#!/usr/bin/env bash
# init() without loomrun: env:// with rank 0 hosting the store, and file://.
set -u
perf=$1
source "$(dirname "$0")/lib.sh"
port=$(free_port)
on_failure() { show_logs +1 "$dir/out1"; }

run_pair() {
  local pids=()
  for r in 0 1; do
    timeout 90 env "$@" RANK=$r WORLD_SIZE=2 "$perf" -b 8 -e 64K -f 16 -n 2 -w 1 --check > "$dir/out$r" 2>&1 &
    pids+=($!)
  done
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  cat "$dir/out0"
  [ $rc = 0 ] && grep -q "out of bounds values : 0 OK" "$dir/out0"
}

run_pair MASTER_ADDR=127.0.0.1 MASTER_PORT=$port || fail "env:// init"
run_pair LOOM_INIT_METHOD=tcp://127.0.0.1:$((port + 1)) || fail "tcp:// init"
run_pair LOOM_INIT_METHOD=file://$dir/store || fail "file:// init"
echo "init methods: all passed"
