#!/usr/bin/env bash
# init() without loomrun (env://, rank 0 hosting the store) when the store's host is lost before
# the job is complete (rank 2 of 3 never starts): killed (SIGKILL), rank 1 fails at once; frozen
# (SIGSTOP), rank 1 fails within a few LOOM_TIMEOUTs, not the store client's minutes. Either way
# its error names init, its rank and the store.
set -u
perf=$1
source "$(dirname "$0")/lib.sh"
host_pid=""
cleanup() { [ -n "$host_pid" ] && kill -9 "$host_pid" 2>/dev/null; }
on_failure() { show_logs 5 "$dir"/*.log; }
export LOOM_SECRET=store-host-test-$$ LOOM_TIMEOUT=5 WORLD_SIZE=3 MASTER_ADDR=127.0.0.1

# lose HOW BOUND: rank 0 hosts, rank 1 joins; once rank 1 is waiting, rank 0 gets signal HOW.
lose() {
  local how=$1 bound=$2 port; port=$(free_port)
  RANK=0 MASTER_PORT=$port "$perf" -b 8 -e 8 -n 1 -w 0 > "$dir/rank0-$how.log" 2>&1 &
  host_pid=$!
  local deadline=$((SECONDS + 30))
  until [ -n "$(ss -Hltn "sport = :$port")" ]; do
    [ "$SECONDS" -lt "$deadline" ] || fail "$how: rank 0 does not serve the store"
    sleep 0.05
  done
  RANK=1 MASTER_PORT=$port timeout 60 "$perf" -b 8 -e 8 -n 1 -w 0 > "$dir/rank1-$how.log" 2>&1 &
  local rank1=$!
  # Before the signal, rank 1 holds a connection to the store (a client other than rank 0's own).
  deadline=$((SECONDS + 30))
  until ss -Htnp "dport = :$port" | grep -o 'pid=[0-9]*' | grep -qv "^pid=$host_pid\$"; do
    [ "$SECONDS" -lt "$deadline" ] || fail "$how: rank 1 never connected to the store"
    sleep 0.05
  done
  sleep 0.5  # and is waiting in init
  kill -"$how" "$host_pid"
  local start=$SECONDS rc=0
  wait "$rank1" || rc=$?
  local took=$((SECONDS - start))
  kill -9 "$host_pid" 2>/dev/null; { wait "$host_pid"; } 2>/dev/null; host_pid=""
  [ "$rc" != 0 ] && [ "$rc" != 124 ] || fail "$how: rank 1 exited with $rc"
  [ "$took" -le "$bound" ] || fail "$how: rank 1 took ${took}s to give up (bound ${bound}s)"
  grep -q "init: rank 1/3: .*127.0.0.1:$port" "$dir/rank1-$how.log" ||
    fail "$how: the error does not name init, rank 1 and the store: $(tail -1 "$dir/rank1-$how.log")"
  echo "store host $how: rank 1 gave up after ${took}s: $(tail -1 "$dir/rank1-$how.log")"
}
lose KILL 10
lose STOP 40
