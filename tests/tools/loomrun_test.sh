#!/usr/bin/env bash
# loomrun: environment of each worker, rank prefixes, the first failure's exit code, restarts.
set -u
loomrun=$1
source "$(dirname "$0")/lib.sh"

out=$("$loomrun" --nproc-per-node 3 sh -c 'echo "r=$RANK w=$WORLD_SIZE l=$LOCAL_RANK lw=$LOCAL_WORLD_SIZE m=$MASTER_ADDR:$MASTER_PORT"' 2>&1) \
  || fail "a clean run exited $?"
for r in 0 1 2; do
  echo "$out" | grep -q "^\[$r\] r=$r w=3 l=$r lw=3 m=127.0.0.1:[0-9]" || fail "rank $r line missing or unprefixed in: $out"
done

start=$(date +%s)
"$loomrun" --nproc-per-node 3 --grace 2 sh -c 'if [ "$RANK" = 1 ]; then exit 7; fi; sleep 60' >/dev/null 2>&1
code=$?
[ "$code" = 7 ] || fail "expected the failing worker's code 7, got $code"
[ $(( $(date +%s) - start )) -lt 20 ] || fail "the other workers were not stopped promptly"

"$loomrun" --nproc-per-node 2 --grace 1 sh -c 'trap "" TERM; if [ "$RANK" = 0 ]; then exit 3; fi; sleep 60' >/dev/null 2>&1
code=$?
[ "$code" = 3 ] || fail "a worker that ignores SIGTERM must be killed; expected 3, got $code"

"$loomrun" --nproc-per-node 1 /nonexistent/program >/dev/null 2>&1
[ $? = 127 ] || fail "a program that cannot start should give 127"

"$loomrun" --nnodes 2 --node-rank 2 true >/dev/null 2>&1 && fail "node rank outside nnodes accepted"
# --max-restarts: a worker that always exits 3 runs 1 + 2 times, then loomrun exits 3.
"$loomrun" --nproc-per-node 2 --max-restarts 2 --grace 1 sh -c \
  'echo "$LOOM_RESTART_COUNT" >> '"$dir"'/starts.$RANK
   if [ "$RANK" = 1 ]; then  # fail once rank 0 has started too
     until grep -qx "$LOOM_RESTART_COUNT" '"$dir"'/starts.0 2>/dev/null; do sleep 0.01; done; exit 3
   fi; sleep 60' >/dev/null 2>&1
code=$?
[ "$code" = 3 ] || fail "restarts spent: expected the worker's code 3, got $code"
[ "$(cat "$dir/starts.1" | tr '\n' ' ')" = "0 1 2 " ] || fail "expected starts 0 1 2, got: $(cat "$dir/starts.1")"
[ "$(wc -l < "$dir/starts.0")" = 3 ] || fail "every worker is restarted, not only the failing one"
# A worker killed once under --max-restarts 2: the job completes.
"$loomrun" --nproc-per-node 2 --max-restarts 2 sh -c \
  'if [ "$RANK" = 0 ] && [ "$LOOM_RESTART_COUNT" = 0 ]; then kill -KILL $$; fi; exit 0' >/dev/null 2>&1
code=$?
[ "$code" = 0 ] || fail "a job restarted after a killed worker should complete, got $code"
# --cpu-bind cores: local ranks in blocks over loomrun's CPUs; none (the default) leaves them all.
cpus_of() { sed -n 's/^\[\([0-9]*\)\] Cpus_allowed_list:[[:space:]]*/\1:/p' | sort | tr '\n' ' '; }
show='grep Cpus_allowed_list /proc/self/status'
got=$(taskset -c 0 "$loomrun" --cpu-bind cores --nproc-per-node 3 sh -c "$show" 2>/dev/null | cpus_of)
[ "$got" = "0:0 1:0 2:0 " ] || fail "--cpu-bind cores on one CPU: expected every worker on 0, got: $got"
if taskset -c 0,1 true 2>/dev/null; then
  got=$(taskset -c 0,1 "$loomrun" --cpu-bind cores --nproc-per-node 4 sh -c "$show" 2>/dev/null | cpus_of)
  [ "$got" = "0:0 1:0 2:1 3:1 " ] || fail "--cpu-bind cores, 4 workers on 2 CPUs: got: $got"
  got=$(LOOM_CPU_BIND=cores taskset -c 0,1 "$loomrun" --nproc-per-node 1 sh -c "$show" 2>/dev/null | cpus_of)
  [ "$got" = "0:0-1 " ] || fail "--cpu-bind cores, 1 worker on 2 CPUs: expected both, got: $got"
  got=$(taskset -c 0,1 "$loomrun" --nproc-per-node 2 sh -c "$show" 2>/dev/null | cpus_of)
  [ "$got" = "0:0-1 1:0-1 " ] || fail "unbound workers should keep loomrun's CPUs, got: $got"
fi
"$loomrun" --cpu-bind numa true >/dev/null 2>&1
[ $? = 2 ] || fail "--cpu-bind numa should be refused with code 2"
echo "loomrun: all checks passed"
