#!/usr/bin/env bash
# loomrun --on-failure shrink with loom-train: rank 2 of 3 is SIGKILLed mid-training; the other
# two make a communicator of themselves (Communicator::shrink), agree on the step, share out
# the rest of the epoch and finish every epoch, reporting the smaller effective batch. Without
# the option the same death stops the job (loomrun's restart path), as before. Two deaths of 4
# ranks shrink twice; a frozen rank is left out and stopped by loomrun.
set -u
loomrun=$1 train=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; cat "$dir"/*.log; exit 1; }
cat > "$dir/victim.sh" <<'SCRIPT'
#!/bin/sh
# Rank 2 dies by SIGKILL once it has trained a while (its first epoch line is rank 0's only,
# so wait on time, long enough for a few steps on a loaded machine).
if [ "$RANK" = 2 ]; then (sleep 1.5; kill -9 $$) & fi
exec "$@"
SCRIPT
chmod +x "$dir/victim.sh"
args=(--layers 32,256,256,8 --samples 6000 --batch-size 16 --epochs 100 --seed 3 --calibrate-steps 0)

"$loomrun" --nproc-per-node 3 --on-failure shrink "$dir/victim.sh" "$train" "${args[@]}" \
  > "$dir/shrink.log" 2>&1 || fail "the survivors did not finish (exit $?)"
grep -q "rank 2 exited with code 137; the other workers go on" "$dir/shrink.log" ||
  fail "rank 2 was not killed mid-run (the run may be too short for this machine)"
grep -qE "going on with 2 of 3 ranks .* effective batch 32 \(was 48\)" "$dir/shrink.log" ||
  fail "no report of the shrink and the effective batch"
grep -q "epoch 100/100 " "$dir/shrink.log" || fail "the survivors did not train every epoch"
grep -q "the run ended with 2 rank(s)" "$dir/shrink.log" || fail "the summary does not say so"
# Training went on learning: the last epoch's loss is below the first's.
awk '/loss per epoch:/ { if ($NF + 0 >= $(NF - 99) + 0) bad = 1; found = 1 }
     END { exit !(found && !bad) }' "$dir/shrink.log" || fail "the loss did not fall"

# Two deaths, two shrinks: the second leaves a communicator that was itself a shrink's, in
# whose memory the DDP's buckets lie (DdpOptions::shared_buckets) until it goes on without it.
cat > "$dir/two_victims.sh" <<'SCRIPT'
#!/bin/sh
if [ "$RANK" = 3 ]; then (sleep 1.5; kill -9 $$) & fi
if [ "$RANK" = 2 ]; then (sleep 3; kill -9 $$) & fi
exec "$@"
SCRIPT
chmod +x "$dir/two_victims.sh"
"$loomrun" --nproc-per-node 4 --on-failure shrink "$dir/two_victims.sh" "$train" "${args[@]}" \
  > "$dir/twice.log" 2>&1 || fail "the survivors of two deaths did not finish (exit $?)"
grep -qE "going on with 2 of 3 ranks .* effective batch 32 \(was 48\)" "$dir/twice.log" ||
  fail "no second shrink (the run may be too short for this machine)"
grep -q "shrunk 2 time(s) after lost ranks: the run ended with 2 rank(s)" "$dir/twice.log" ||
  fail "the summary does not report two shrinks"

# A frozen rank (SIGSTOP, so it never exits): the others' monitor declares it failed, they
# shrink without it and name it to loomrun (LOOM_LEFT_OUT_DIR), which stops it: the job ends
# when the survivors do instead of waiting for it for ever.
cat > "$dir/frozen.sh" <<'SCRIPT'
#!/bin/sh
if [ "$RANK" = 1 ]; then (sleep 1.5; kill -STOP $$) & fi
exec "$@"
SCRIPT
chmod +x "$dir/frozen.sh"
LOOM_HEARTBEAT_TIMEOUT=3 timeout 90 "$loomrun" --nproc-per-node 3 --on-failure shrink \
  "$dir/frozen.sh" "$train" "${args[@]}" > "$dir/frozen.log" 2>&1 ||
  fail "the survivors of a frozen rank did not end the job (exit $?; 124: loomrun waited for it)"
grep -q "rank 1 was left out by the others' shrink while it still ran" "$dir/frozen.log" ||
  fail "loomrun did not stop the frozen rank"
grep -qE "going on with 2 of 3 ranks" "$dir/frozen.log" || fail "no shrink around the frozen rank"
[ -z "$(find "${TMPDIR:-/tmp}" -maxdepth 1 -name 'loomrun-left-out-*' -newer "$dir/frozen.sh")" ] ||
  fail "loomrun left its folder for left-out workers behind"

# The default: the same death stops the others, and loomrun reports the failure.
"$loomrun" --nproc-per-node 3 "$dir/victim.sh" "$train" "${args[@]}" > "$dir/default.log" 2>&1
code=$?
[ "$code" = 137 ] || fail "without --on-failure shrink loomrun exited $code, not 137"
grep -q "stopping the other workers" "$dir/default.log" || fail "the others were not stopped"
! grep -q "going on with" "$dir/default.log" || fail "shrank without --on-failure shrink"
echo "loom-train --on-failure shrink: 2 of 3 ranks finished after rank 2 was killed"
