#!/usr/bin/env bash
# loomrun's torchrun options and dynamic rendezvous on one machine (several loomruns, one
# endpoint): underscore spellings, PET_* defaults, --standalone, node ranks and global ranks
# assigned at the rendezvous (nodes of different sizes), refused combinations, and a restart
# count agreed by every node: a node that joins after a failure restart starts at the job's
# count, not at its own 0; the agent hosting the store killed, another at its address takes it
# over; a signal while waiting at the rendezvous (for a round to close, for an endpoint that does
# not answer, at the exit barrier) ends loomrun at once with 128 + the signal.
set -u
loomrun=$1
source "$(dirname "$0")/lib.sh"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; }
on_failure() { show_logs 20 "$dir"/*.log; }
export LOOM_SECRET=rendezvous-test-$$

# --standalone with torchrun's spellings and a PET_* default.
out=$(PET_NPROC_PER_NODE=3 "$loomrun" --standalone --no-prefix \
  sh -c 'echo "$RANK/$WORLD_SIZE $GROUP_RANK/$GROUP_WORLD_SIZE $TORCHELASTIC_RUN_ID"' 2>/dev/null) ||
  fail "--standalone failed"
[ "$(echo "$out" | sort | cut -d' ' -f1,2 | tr '\n' ' ')" = "0/3 0/1 1/3 0/1 2/3 0/1 " ] ||
  fail "--standalone with PET_NPROC_PER_NODE=3: $out"
echo "$out" | grep -q " standalone-[0-9a-f]\{16\}$" || fail "--standalone made up no run id: $out"

# Refused: MIN above MAX, MIN:MAX without an endpoint, unknown backends, standalone on 2 nodes.
for bad in "--nnodes 3:2 --rdzv-endpoint 127.0.0.1" "--nnodes 1:2" "--rdzv_backend etcd --rdzv_endpoint 127.0.0.1" \
           "--standalone --nnodes 2" "--nnodes 2 --rdzv-endpoint 127.0.0.1 --rdzv-id bad/id"; do
  "$loomrun" $bad true > "$dir/refused" 2>&1
  [ $? = 2 ] || fail "'$bad' was not refused with code 2: $(cat "$dir/refused")"
done

# torchrun's options loomrun does not take are refused by name, with the reason.
for opt in "--log-dir /tmp" "--redirects 3" "--tee=3" "--local-ranks-filter 0" "-m pkg" "--run-path x.py" \
           "--start-method spawn"; do
  "$loomrun" $opt --nproc-per-node 1 true > "$dir/refused" 2>&1
  [ $? = 2 ] && grep -q "torchrun's ${opt%%[ =]*} is not supported: " "$dir/refused" ||
    fail "'$opt' was not refused by name: $(cat "$dir/refused")"
done

# Two nodes of 1 and 2 workers meet at one endpoint, no node ranks given.
port=$(free_port)
for n in 1 2; do
  "$loomrun" --nnodes=2 --nproc_per_node=$n --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:$port \
    --rdzv_id=sizes --no-prefix sh -c 'echo "$RANK $LOCAL_RANK $GROUP_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE"' \
    > "$dir/sizes$n.log" 2>&1 &
  pids+=($!)
done
wait "${pids[0]}" && wait "${pids[1]}" || fail "two nodes of 1 and 2 workers failed"
lines=$(cat "$dir"/sizes*.log | grep -E '^[0-9]+ [0-9]+ [0-9]+ [0-9]+ [0-9]+$' | sort)
[ "$(echo "$lines" | cut -d' ' -f1 | tr '\n' ' ')" = "0 1 2 " ] || fail "global ranks are not 0 1 2: $lines"
[ "$(echo "$lines" | cut -d' ' -f4 | sort -u)" = 3 ] || fail "not every worker sees a world of 3: $lines"
first=$(grep -c "" <<< "$(grep -E '^[0-9]+ [0-9]+ 0 ' <<< "$lines")")
second=$(grep -c "" <<< "$(grep -E '^[0-9]+ [0-9]+ 1 ' <<< "$lines")")
[ $((first + second)) = 3 ] && [ "$first" != "$second" ] || fail "group ranks 0 and 1 do not hold the two nodes: $lines"
while read -r rank local group _ lws; do  # node 0's ranks come first
  [ "$group" = 0 ] && expected=$local || expected=$((first + local))
  [ "$rank" = "$expected" ] || fail "rank $rank (local $local on node $group) out of order: $lines"
done <<< "$lines"
pids=()

# The restart count is the job's: A and B start; node rank 1's worker fails in the first round;
# C joins the round after that restart and must see restart count 1.
port=$(free_port)
cat > "$dir/worker.sh" <<WORKER
echo "\$TORCHELASTIC_RESTART_COUNT \$LOOM_RESTART_COUNT \$WORLD_SIZE" >> "$dir/seen.\$1"
if [ "\$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "\$GROUP_RANK" = 1 ]; then sleep 0.5; exit 3; fi
until [ -e "$dir/release" ]; do sleep 0.05; done
WORKER
node() {
  "$loomrun" --nnodes 2:3 --rdzv-endpoint "127.0.0.1:$port" --rdzv-id agreed --max-restarts 1 \
    --rdzv-conf last_call_timeout=1 --grace 1 sh "$dir/worker.sh" "$1" > "$dir/node$1.log" 2>&1 &
  pids+=($!)
}
node A; node B
wait_for 60 'grep -q "^1 " "$dir/seen.A" 2>/dev/null && grep -q "^1 " "$dir/seen.B" 2>/dev/null' ||
  fail "A and B did not restart after the failure"
node C
wait_for 60 '[ -s "$dir/seen.C" ] && grep -q " 3$" "$dir/seen.A"' || fail "C was not let in"
touch "$dir/release"
for p in "${pids[@]}"; do wait "$p" || fail "a node exited with code $?"; done
pids=()
# B learns that C waits at its next probe of the store (once a second) and may, on a loaded host,
# rejoin after the round that lets C in has closed (last_call_timeout) without it: A and C then run
# a round of 2 before B's arrival ends it. Either way no round after the failure counts again.
[ "$(tail -n 1 "$dir/seen.C")" = "1 1 3" ] && ! grep -qv "^1 1 [23]$" "$dir/seen.C" ||
  fail "C's workers saw '$(tr '\n' ',' < "$dir/seen.C")', not restart count 1 (and last a world of 3)"
[[ "$(tr '\n' ',' < "$dir/seen.A")" =~ ^0\ 0\ 2,1\ 1\ 2,(1\ 1\ 2,)?1\ 1\ 3,$ ]] ||
  fail "A saw '$(tr '\n' ',' < "$dir/seen.A")': a failure restart then letting C in (not counted)"

# The agent hosting the rendezvous store is killed (SIGKILL) while another agent of the same
# machine (same address) and one at another address run: the first takes the store over at the
# same endpoint, the other finds it there, and both go on at 2 nodes after one restart. Then the
# whole machine is lost (both agents at the host's address): the agent at the other address takes
# the store over after a short wait there, not the read timeout (30 s).
cat > "$dir/worker.sh" <<WORKER
echo "\$TORCHELASTIC_RESTART_COUNT \$WORLD_SIZE" >> "$dir/seen.\$1"
if [ "\$TORCHELASTIC_RESTART_COUNT" = 0 ]; then sleep 60; fi
WORKER
agent() {  # NAME NNODES [loomrun options]
  local name=$1 nnodes=$2; shift 2
  "$loomrun" --nnodes "$nnodes" --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "hostlost$port" --max-restarts 1 \
    --rdzv-conf last_call_timeout=1,keep_alive_timeout=10,read_timeout=60 --grace 1 "$@" \
    sh "$dir/worker.sh" "$name" \
    > "$dir/agent$name.log" 2>&1 &
  pids+=($!)
}
# three_agents NNODES: A hosts the store; B at its address, C at 127.0.0.2; all three running.
three_agents() {
  port=$(free_port)
  rm -f "$dir"/seen.* "$dir"/agent*.log
  agent A "$1"
  wait_for 30 '[ -n "$(ss -Hltn "sport = :$port")" ]' || fail "the first agent does not host the store"
  agent B "$1"
  agent C "$1" --local-addr 127.0.0.2
  wait_for 60 '[ -s "$dir/seen.A" ] && [ -s "$dir/seen.B" ] && [ -s "$dir/seen.C" ]' || fail "A, B and C did not start"
  grep -q "^0 3$" "$dir/seen.A" || fail "A's first round is not of 3 nodes: $(cat "$dir/seen.A")"
}
# survivors_finish SECONDS PID...: each exits 0 within SECONDS.
survivors_finish() {
  local bound=$1; shift
  wait_for "$bound" "! kill -0 $* 2>/dev/null" || fail "the surviving agents did not finish within ${bound}s"
  for p in "$@"; do wait "$p" || fail "an agent that survived the store's host exited with code $?"; done
}

three_agents 2:3
kill -9 "${pids[0]}"
survivors_finish 60 "${pids[@]:1}"
pids=()
grep -q "this node (127.0.0.1) took it over on port $port" "$dir/agentB.log" ||
  fail "B (same address as the lost host) did not take the store over"
# (C either joins B's store after noticing the loss, or reconnects to the same endpoint before it
# notices: both keep the job's store.)
for n in B C; do
  [ "$(tail -n 1 "$dir/seen.$n")" = "1 2" ] || fail "$n did not go on at 2 nodes after one restart: $(cat "$dir/seen.$n")"
done

three_agents 1:3
kill -9 "${pids[0]}" "${pids[1]}"
start=$SECONDS
# Noticing takes up to 4 s and the wait for a sibling at the lost address 10 s: 30 s leaves room
# for a loaded host and none for the read timeout (60 s here).
wait_for 30 "grep -q 'this node (127.0.0.2) took it over' '$dir/agentC.log'" ||
  fail "C did not take the store over within 30 s of losing the host's machine"
survivors_finish 40 "${pids[2]}"
pids=()
grep -q "this node (127.0.0.2) took it over on port $port" "$dir/agentC.log" ||
  fail "C did not take the store over when the host's machine was lost"
[ "$(tail -n 1 "$dir/seen.C")" = "1 1" ] || fail "C did not go on alone after one restart: $(cat "$dir/seen.C")"
echo "the host's machine lost: C took the store over and finished $((SECONDS - start)) s after the kill"
# stopped_waiting SIGNAL CODE LOG PID: PID, signalled while waiting at the rendezvous, exits with
# CODE within 5 s and says where it was (before, it waited out join_timeout, 600 s by default).
stopped_waiting() {
  local sig=$1 code=$2 log=$3 pid=$4 rc=0
  kill "-$sig" "$pid"
  wait_for 5 "! kill -0 $pid 2>/dev/null" || fail "SIG$sig at the rendezvous did not stop loomrun within 5 s ($log)"
  wait "$pid" || rc=$?
  [ "$rc" = "$code" ] || fail "SIG$sig at the rendezvous: exit code $rc, not $code ($log)"
  grep -q "got signal .*stopped while waiting for" "$dir/$log" || fail "SIG$sig: no message in $log"
}
# The first node, alone, waits for the round to close.
port=$(free_port)
"$loomrun" --nnodes 2 --rdzv-endpoint "127.0.0.1:$port" --rdzv-id alone true > "$dir/alone.log" 2>&1 &
pids=($!)
wait_for 10 "grep -q 'Starting elastic_operator' '$dir/alone.log'" || fail "the lone node did not start"
sleep 0.5
stopped_waiting TERM 143 alone.log "${pids[0]}"
# A node whose endpoint does not answer (nothing listens there).
"$loomrun" --nnodes 2 --rdzv-endpoint "127.0.0.2:$(free_port)" --rdzv-id nobody true > "$dir/nobody.log" 2>&1 &
pids=($!)
sleep 2  # started and trying the endpoint, on a loaded host too
stopped_waiting INT 130 nobody.log "${pids[0]}"
# At the exit barrier: A's worker has finished, B's still runs.
port=$(free_port)
pids=()
for n in A B; do
  "$loomrun" --nnodes 2 --rdzv-endpoint "127.0.0.1:$port" --rdzv-id barrier --grace 1 \
    sh -c "[ $n = B ] && exec sleep 600; touch '$dir/barrier-done'" > "$dir/barrier$n.log" 2>&1 &
  pids+=($!)
done
wait_for 30 "[ -e '$dir/barrier-done' ]" || fail "the exit-barrier pair did not meet"
sleep 2  # A's loomrun sees its worker end within --monitor-interval (0.1 s), on a loaded host too
stopped_waiting HUP 129 barrierA.log "${pids[0]}"
grep -q "exit barrier" "$dir/barrierA.log" || fail "A was not at the exit barrier: $(tail -2 "$dir/barrierA.log")"
kill "${pids[1]}"; wait "${pids[1]}"
pids=()

echo "loomrun rendezvous: torchrun options, ranks assigned, restart count agreed by every node, the store's host lost, signals while waiting"
