#!/usr/bin/env bash
# loomrun's dynamic rendezvous on test-bed nodes (tools/cluster), every node given only
# --rdzv-endpoint (node 1's address), no node rank:
#   - 2 nodes join: ranks assigned at the rendezvous, the collectives check out;
#   - --nnodes 1:3 with the third node joining while the first two train: it is let in at a
#     restart (the same restart count), and the job finishes on 3 nodes;
#   - --nnodes 2:3 on 3 nodes, one node SIGKILLed whole (loomrun and workers) mid-training: the
#     other two re-rendezvous, restart at 2 nodes from the last snapshot and finish;
#   - the same with node 1 killed, the node hosting the rendezvous store: node 2 takes it over;
#   - --on-failure shrink: a node killed, the other two nodes' workers go on without a restart;
#   - --on-failure shrink: a worker frozen (SIGSTOP) on a node where no other worker runs: the
#     others shrink past it, its node's loomrun stops it, and every node exits 0;
#   - --on-failure shrink: the node hosting the workers' store cut off from the network: the
#     other two go on, and its worker does not go on alone (below --nnodes MIN).
# Needs root (namespaces); exits 77 (CTest: skipped) with the reason where not permitted.
set -u
build=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
cluster=$root/tools/cluster/cluster.sh
loomrun=$build/tools/loomrun perf=$build/bench/loom-perf train=$build/tools/loom-train
export LOOM_CLUSTER=e$(( $$ % 100000 ))
export LOOM_SECRET=elastic-test-$$ LOOM_TIMEOUT=60
source "$(dirname "$0")/lib.sh"
cleanup() { "$cluster" down >/dev/null 2>&1; }
on_failure() { show_logs 40 "$dir"/node*.log; }
need_test_bed
# start I NNODES RUN-ID ARGS...: loomrun on node I in the background, its pid in pid[I].
declare -A pid
start() {
  local i=$1 nnodes=$2 id=$3; shift 3
  "$cluster" exec "$i" "$loomrun" --nnodes "$nnodes" --nproc-per-node 1 \
    --rdzv-endpoint "$("$cluster" addr 1):29400" --rdzv-id "$id" \
    --rdzv-conf last_call_timeout=2,read_timeout=10,keep_alive_timeout=20 --max-restarts 3 \
    "$@" > "$dir/node$i.log" 2>&1 &
  pid[$i]=$!
}
finishes() {  # finishes I WHAT: node I's loomrun exits 0
  wait "${pid[$1]}" || fail "$2: node $1 exited with code $?"
}
train_args() {  # ID [SAMPLES]: hundreds of steps with a snapshot every 10 (in the shared /tmp)
  echo "$train" --layers 32,512,512,4 --samples "${2:-12288}" --batch-size 16 --epochs 1 \
    --calibrate-steps 0 --snapshot "$dir/snap-$1" --save-every 10
}

"$cluster" up 3 >/dev/null || fail "cluster up 3"

# 2 nodes, only the endpoint: node ranks 0 and 1 assigned, correct results.
rm -f "$dir"/node*.log
for i in 1 2; do start "$i" 2 pair "$perf" -b 8 -e 1M -f 16 -n 2 -w 1 --check; done
for i in 1 2; do finishes "$i" "2 nodes"; done
grep -q "out of bounds values : 0 OK" "$dir/node1.log" "$dir/node2.log" || fail "2 nodes: wrong results"
[ "$(cat "$dir"/node*.log | grep -c "group_world_size=2")" = 2 ] || fail "2 nodes: not both in a round of 2"
[ "$(cat "$dir"/node*.log | grep -E "^  group_rank=" | sort | tr '\n' ' ')" = "  group_rank=0   group_rank=1 " ] ||
  fail "2 nodes: group ranks are not 0 and 1"
echo "2 nodes joined with only --rdzv-endpoint: ranks assigned, results correct"

# --nnodes 1:3: two nodes start; the third joins once they train, and is let in.
rm -f "$dir"/node*.log
# (a run long enough to be still training when the third node has started and joined)
for i in 1 2; do start "$i" 1:3 late $(train_args late 49152); done
wait_for 60 '[ -n "$(ls "$dir"/snap-late/snapshot-late-*.loom 2>/dev/null)" ]' || fail "1:3: no snapshot"
grep -q "group_world_size=2" "$dir/node1.log" || fail "1:3: the first round is not of the 2 nodes started"
start 3 1:3 late $(train_args late 49152)
for i in 1 2 3; do finishes "$i" "1:3 with a late node"; done
for i in 1 2 3; do
  grep -q "group_world_size=3" "$dir/node$i.log" || fail "1:3: node $i never ran in a round of 3"
done
grep -q "nodes are waiting to join" "$dir/node1.log" || fail "1:3: node 1 did not restart for the late node"
! grep -q "restart_count=1" "$dir/node3.log" || fail "1:3: letting a node in counted as a failure"
grep -q "resumed at epoch" "$dir"/node*.log || fail "1:3: the round of 3 did not resume from a snapshot"
echo "--nnodes 1:3: the late third node was let in at a restart and the job finished on 3"

# kill_mid_training VICTIM NAME: 3 nodes of --nnodes 2:3; VICTIM is killed whole after a snapshot.
kill_mid_training() {
  local victim=$1 id=$2 survivors=()
  rm -f "$dir"/node*.log
  for i in 1 2 3; do start "$i" 2:3 "$id" $(train_args "$id"); done
  wait_for 90 '[ "$(ls "$dir"/snap-"$id"/snapshot-"$id"-*.loom 2>/dev/null | wc -l)" -ge 2 ]' ||
    fail "$id: no snapshot"
  grep -q "group_world_size=3" "$dir/node$victim.log" || fail "$id: not started on 3 nodes"
  local killed_at; killed_at=$(date +%s.%N)
  "$cluster" kill "$victim"
  { wait "${pid[$victim]}"; } 2>/dev/null
  for i in 1 2 3; do [ "$i" = "$victim" ] || survivors+=("$i"); done
  # Recovery: the kill until both survivors' workers are restarted in a round of 2, within half
  # the store client's minute of reconnecting (a lost store host must not cost that minute).
  wait_for 30 "grep -q group_world_size=2 $dir/node${survivors[0]}.log && grep -q group_world_size=2 $dir/node${survivors[1]}.log" ||
    fail "$id: the survivors did not form a round of 2 within 30 s"
  echo "$id: node $victim killed; workers restarted at 2 nodes after $(echo "$(date +%s.%N) - $killed_at" | bc | cut -c1-5) s"
  for i in "${survivors[@]}"; do
    finishes "$i" "$id"
    grep -q "group_world_size=2" "$dir/node$i.log" || fail "$id: node $i did not go on at 2 nodes"
    grep -q "restart_count=1" "$dir/node$i.log" || fail "$id: node $i's restart count is not 1"
  done
  grep -q "resumed at epoch" "$dir"/node*.log || fail "$id: the 2 nodes did not resume from a snapshot"
}
kill_mid_training 3 lost
echo "--nnodes 2:3, node 3 killed mid-training: the other 2 went on from the last snapshot"
kill_mid_training 1 hostlost
grep -q "took it over" "$dir/node2.log" || fail "hostlost: node 2 did not take the rendezvous store over"
echo "--nnodes 2:3, node 1 (hosting the rendezvous) killed: node 2 took the store over, the job finished"

# --on-failure shrink: 3 nodes of --nnodes 2:3, one (not hosting the workers' store) killed whole
# mid-training: the other two nodes' workers shrink and go on at once, no restart, and finish.
rm -f "$dir"/node*.log
for i in 1 2 3; do start "$i" 2:3 shrink --on-failure shrink $(train_args shrink); done
wait_for 90 '[ -n "$(ls "$dir"/snap-shrink/snapshot-shrink-*.loom 2>/dev/null)" ]' || fail "shrink: no snapshot"
victim=3
grep -q "^  group_rank=0$" "$dir/node3.log" && victim=2
"$cluster" kill "$victim"
{ wait "${pid[$victim]}"; } 2>/dev/null
for i in 1 2 3; do
  [ "$i" = "$victim" ] && continue
  finishes "$i" "shrink"
  ! grep -q "restart_count=1" "$dir/node$i.log" || fail "shrink: node $i restarted its workers"
done
grep -q "going on with 2 of 3 ranks" "$dir"/node*.log || fail "shrink: the survivors did not shrink"
grep -q "the run ended with 2 rank(s)" "$dir"/node*.log || fail "shrink: no summary at 2 ranks"
echo "--nnodes 2:3 --on-failure shrink, node $victim killed: the other 2 went on without a restart"

# --on-failure shrink, a worker frozen on a node of its own: the others declare it failed once
# its heartbeat stops and shrink past it, and the survivors name it in the workers' store, where
# its node's loomrun (which no survivor's folder reaches) finds it and stops it --grace later.
# Before, that loomrun waited for ever for the stopped worker, and the others for it at the exit
# barrier.
rm -f "$dir"/node*.log
export LOOM_HEARTBEAT_TIMEOUT=5
for i in 1 2 3; do start "$i" 2:3 frozen --on-failure shrink $(train_args frozen 98304); done
unset LOOM_HEARTBEAT_TIMEOUT
wait_for 90 '[ -n "$(ls "$dir"/snap-frozen/snapshot-frozen-*.loom 2>/dev/null)" ]' || fail "frozen: no snapshot"
for i in 1 2 3; do
  grep -q "group_world_size=3" "$dir/node$i.log" || fail "frozen: node $i is not in a round of 3"
done
victim=3
grep -q "^  group_rank=0$" "$dir/node3.log" && victim=2
worker=""
for p in $("$cluster" pids "$victim"); do
  tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -q "^$train " && worker=$p
done
[ -n "$worker" ] || fail "frozen: no worker found on node $victim"
kill -STOP "$worker"
wait_for 90 '! kill -0 "${pid[1]}" 2>/dev/null && ! kill -0 "${pid[2]}" 2>/dev/null && ! kill -0 "${pid[3]}" 2>/dev/null' ||
  { kill -9 "$worker"; fail "frozen: a node's loomrun still waits 90 s after the worker on node $victim froze"; }
for i in 1 2 3; do finishes "$i" "frozen"; done
grep -q "rank .* was left out by the others' shrink" "$dir/node$victim.log" ||
  fail "frozen: node $victim's loomrun did not stop its left-out worker"
grep -q "going on with 2 of 3 ranks" "$dir"/node*.log || fail "frozen: the survivors did not shrink"
echo "--nnodes 2:3 --on-failure shrink, the worker on node $victim frozen: its loomrun stopped it, all exited 0"
# --on-failure shrink, a network cut: the node hosting the workers' store is cut off from the
# switch (its packets vanish, no error on either side). Its worker, alone with the store, would
# shrink to a job of its own beside the other two nodes, which take the rendezvous over and
# restart from the snapshot: two jobs writing one snapshot. Below --nnodes MIN (2) the shrink is
# refused; the cut node's loomrun waits for a round of 2 until it is told to stop.
rm -f "$dir"/node*.log
export LOOM_HEARTBEAT_TIMEOUT=3
for i in 1 2 3; do start "$i" 2:3 cut --on-failure shrink $(train_args cut 98304); done
unset LOOM_HEARTBEAT_TIMEOUT
wait_for 90 '[ -n "$(ls "$dir"/snap-cut/snapshot-cut-*.loom 2>/dev/null)" ]' || fail "cut: no snapshot"
victim=$(grep -l "^  group_rank=0$" "$dir"/node*.log | head -1 | sed 's/.*node\([0-9]\)\.log/\1/')
[ -n "$victim" ] || fail "cut: no node hosts the workers' store"
"$cluster" cut "$victim"
for i in 1 2 3; do [ "$i" = "$victim" ] || finishes "$i" "cut"; done
grep -q "summary: .*(2 rank(s) x batch" "$dir"/node*.log || fail "cut: the other two did not finish at 2 ranks"
wait_for 30 'grep -q "fewer than the job.s minimum of 2" "$dir/node$victim.log"' ||
  fail "cut: node $victim's worker did not refuse to go on alone"
! grep -q "going on with 1 of 3" "$dir/node$victim.log" || fail "cut: node $victim's worker went on alone"
kill -TERM "${pid[$victim]}"
wait_for 10 '! kill -0 "${pid[$victim]}" 2>/dev/null' || fail "cut: node $victim's loomrun did not stop on SIGTERM"
code=0; wait "${pid[$victim]}" || code=$?
[ "$code" = 143 ] || fail "cut: node $victim's loomrun exited with code $code on SIGTERM, not 143"
"$cluster" mend "$victim"
echo "--nnodes 2:3 --on-failure shrink, node $victim (the workers' store) cut off: the other 2 finished, it did not go on alone"
echo "elastic: all passed"
