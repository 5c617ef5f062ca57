#!/usr/bin/env bash
# A static launch across two loomruns (nodes) with --max-restarts: node 0's workers fail fast in
# attempts 0 and 1. Each loomrun counted its own attempts, so node 0 ran ahead into attempt 2
# while node 1's workers still waited in attempt 0's key space, and each side timed out in turn
# until every restart was spent. Now the nodes agree on the attempt through node 0's store: node
# 1 leaves attempt 0 as soon as node 0 enters 1, and both finish in attempt 2, well within one
# LOOM_TIMEOUT.
set -u
loomrun=$1 perf=$2
pids=()
source "$(dirname "$0")/lib.sh"
cleanup() { kill "${pids[@]}" 2>/dev/null; }
on_failure() { show_logs 40 "$dir"/node*.log; }
export LOOM_SECRET=static-restart-test LOOM_TIMEOUT=30
cat > "$dir/worker.sh" <<WORKER
if [ "\${LOOM_RESTART_COUNT:-0}" -lt 2 ] && [ "\$NODE_RANK" = 0 ]; then exit 3; fi
exec "$perf" -b 8 -e 8 -n 1 -w 1
WORKER
port=$(free_port)
start=$SECONDS
for node in 0 1; do
  "$loomrun" --nnodes 2 --node-rank "$node" --nproc-per-node 1 --master-addr 127.0.0.1 \
    --master-port "$port" --max-restarts 4 sh "$dir/worker.sh" > "$dir/node$node.log" 2>&1 &
  pids+=($!)
done
codes=()
for pid in "${pids[@]}"; do
  wait "$pid"
  codes+=($?)
done
took=$((SECONDS - start))
[ "${codes[*]}" = "0 0" ] || fail "exit codes ${codes[*]}, not 0 0"
[ "$took" -lt 25 ] || fail "took $took s: a node waited out LOOM_TIMEOUT in an attempt alone"
# Node 1 follows node 0 out of an attempt it left, or, started after node 0 had left attempt 0
# (a slow start: a loaded host, a sanitizer), begins in node 0's attempt at once.
first=$(grep -m 1 -o "restart_count=[0-9]*" "$dir/node1.log")
grep -q "another node restarted its workers; restarting these in attempt [12]" "$dir/node1.log" ||
  [ "$first" != "restart_count=0" ] ||
  fail "node 1 did not follow node 0 into its attempt"
grep -q "restart_count=2" "$dir/node1.log" || fail "node 1 never ran attempt 2"
echo "loomrun: two static nodes agreed on the attempt and finished in attempt 2 in $took s"
