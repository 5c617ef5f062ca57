#!/usr/bin/env bash
# loomrun --on-failure shrink with loom-train: rank 2 of 3 is SIGKILLed mid-training; the other
# two make a communicator of themselves (Communicator::shrink), agree on the step, share out
# the rest of the epoch and finish every epoch, reporting the smaller effective batch. Without
# the option the same death stops the job (loomrun's restart path), as before. Two deaths of 4
# ranks shrink twice; a frozen rank is left out and stopped by loomrun; a rank lost inside the
# recovery makes the survivors shrink again.
set -u
loomrun=$1 train=$2
source "$(dirname "$0")/lib.sh"
on_failure() { show_logs +1 "$dir"/*.log; }
# A wrapper that, for each RANK:SIGNAL:SECONDS[:PATTERN], sends SIGNAL to that rank SECONDS
# after its start (a wait on time, long enough for a few steps on a loaded machine: a rank's
# epoch lines are rank 0's only), or after PATTERN appears in $WATCH_LOG (within a minute), then
# runs the command.
wrapper() {  # file rank:signal:seconds[:pattern]...
  local file=$1 spec r sig secs pattern wait
  shift
  {
    echo '#!/bin/sh'
    for spec in "$@"; do
      IFS=: read -r r sig secs pattern <<< "$spec"
      wait=""
      [ -n "$pattern" ] &&
        wait="for i in \$(seq 600); do grep -q '$pattern' \"\$WATCH_LOG\" && break; sleep 0.1; done; "
      echo "if [ \"\$RANK\" = $r ]; then (${wait}sleep $secs; kill -$sig \$\$) & fi"
    done
    echo 'exec "$@"'
  } > "$file"
  chmod +x "$file"
}
wrapper "$dir/victim.sh" 2:KILL:1.5
args=(--layers 32,256,256,8 --samples 6000 --batch-size 16 --epochs 100 --seed 3 --calibrate-steps 0)

# loomrun --on-failure shrink over NPROC ranks through WRAPPER, its output in $dir/LOG.log; a
# job that does not end within 90 s fails with 124.
shrink_run() {  # log nproc wrapper
  timeout 90 "$loomrun" --nproc-per-node "$2" --on-failure shrink "$3" "$train" "${args[@]}" \
    > "$dir/$1.log" 2>&1
}
expect() {  # log extended-regex why-not
  grep -qE "$2" "$dir/$1.log" || fail "$3"
}

shrink_run shrink 3 "$dir/victim.sh" || fail "the survivors did not finish (exit $?)"
expect shrink "rank 2 exited with code 137; the other workers go on" \
  "rank 2 was not killed mid-run (the run may be too short for this machine)"
expect shrink "going on with 2 of 3 ranks .* effective batch 32 \(was 48\)" \
  "no report of the shrink and the effective batch"
expect shrink "epoch 100/100 " "the survivors did not train every epoch"
expect shrink "the run ended with 2 rank\(s\)" "the summary does not say so"
# Training went on learning: the last epoch's loss is below the first's.
awk '/loss per epoch:/ { if ($NF + 0 >= $(NF - 99) + 0) bad = 1; found = 1 }
     END { exit !(found && !bad) }' "$dir/shrink.log" || fail "the loss did not fall"

# Two deaths, two shrinks: the second leaves a communicator that was itself a shrink's, in
# whose memory the DDP's buckets lie (DdpOptions::shared_buckets) until it goes on without it.
# The second a second after the first shrink, not in its midst.
wrapper "$dir/two_victims.sh" 3:KILL:1.5 "2:KILL:1:going on with 3 of 4"
WATCH_LOG="$dir/twice.log" shrink_run twice 4 "$dir/two_victims.sh" ||
  fail "the survivors of two deaths did not finish (exit $?)"
expect twice "going on with 2 of 3 ranks .* effective batch 32 \(was 48\)" \
  "no second shrink (the run may be too short for this machine)"
expect twice "shrunk 2 time\(s\) after lost ranks: the run ended with 2 rank\(s\)" \
  "the summary does not report two shrinks"

# A frozen rank (SIGSTOP, so it never exits): the others' monitor declares it failed, they
# shrink without it and name it to loomrun (LOOM_LEFT_OUT_DIR and the workers' store), which
# stops it --grace later: the job ends when the survivors do instead of waiting for it for ever.
wrapper "$dir/frozen.sh" 1:STOP:1.5
LOOM_HEARTBEAT_TIMEOUT=3 shrink_run frozen 3 "$dir/frozen.sh" ||
  fail "the survivors of a frozen rank did not end the job (exit $?; 124: loomrun waited for it)"
expect frozen "rank 1 was left out by the others' shrink and still ran" \
  "loomrun did not stop the frozen rank"
expect frozen "going on with 2 of 3 ranks" "no shrink around the frozen rank"
[ -z "$(find "${TMPDIR:-/tmp}" -maxdepth 1 -name 'loomrun-left-out-*' -newer "$dir/frozen.sh")" ] ||
  fail "loomrun left its folder for left-out workers behind"

# A second failure inside the recovery: rank 3 is killed, and rank 2 kills itself as soon as it
# says it shrinks, so that it dies a member of the survivors while they agree on the step and
# move the DDP over (the default model: tens of MB to broadcast). That PeerError ended every
# survivor; now they shrink again, without rank 2, and finish. 400 steps: 4 ranks ran 60 in 2 s
# here, over before the kill at 3 s.
cat > "$dir/in_recovery.sh" <<'WRAPPER'
#!/bin/sh
if [ "$RANK" = 3 ]; then (sleep 3; kill -KILL $$) & fi
if [ "$RANK" = 2 ]; then
  (for i in $(seq 3000); do grep -q 'rank 2: .*shrinking' "$WATCH_LOG" && break; sleep 0.02; done
   kill -KILL $$) &
fi
exec "$@"
WRAPPER
chmod +x "$dir/in_recovery.sh"
WATCH_LOG="$dir/in_recovery.log" timeout 120 "$loomrun" --nproc-per-node 4 --on-failure shrink \
  "$dir/in_recovery.sh" "$train" --batch-size 16 --steps 400 --calibrate-steps 0 \
  > "$dir/in_recovery.log" 2>&1 || fail "a failure inside the recovery ended the survivors (exit $?)"
expect in_recovery "shrinking again \(--on-failure shrink\)" \
  "no second failure inside the recovery (the timing may not suit this machine)"
expect in_recovery "going on with 2 of 4 ranks" "the survivors did not go on as 2 ranks"
expect in_recovery "step 400 " "the survivors did not train to the last step"

# The default: the same death stops the others, and loomrun reports the failure.
"$loomrun" --nproc-per-node 3 "$dir/victim.sh" "$train" "${args[@]}" > "$dir/default.log" 2>&1
code=$?
[ "$code" = 137 ] || fail "without --on-failure shrink loomrun exited $code, not 137"
grep -q "stopping the other workers" "$dir/default.log" || fail "the others were not stopped"
! grep -q "going on with" "$dir/default.log" || fail "shrank without --on-failure shrink"
echo "loom-train --on-failure shrink: 2 of 3 ranks finished after rank 2 was killed, 2 of 4 after two"
echo "deaths, 2 of 3 after one froze"
