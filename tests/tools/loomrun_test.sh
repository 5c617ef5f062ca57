#!/usr/bin/env bash
# loomrun: environment of each worker, rank prefixes, and the first failure's exit code.
set -u
loomrun=$1
fail() { echo "FAIL: $*"; exit 1; }

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
echo "loomrun: all checks passed"
