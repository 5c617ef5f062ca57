#!/usr/bin/env bash
# loomrun --max-restarts converges whatever the failed attempt left in the store or on disk: a
# rank that dies before it builds its communicator, one that dies right after, one killed in the
# middle of a collective, and rank 0 killed while it writes a snapshot. Each job ends with exit
# code 0 well within LOOM_TIMEOUT (a restart that waited for a dead attempt's keys would not).
set -u
loomrun=$1 perf=$2 train=$3
source "$(dirname "$0")/lib.sh"
on_failure() { show_logs 30 "$dir/log"; }
export LOOM_TIMEOUT=120
bound=60
# The pid of the launcher's worker of rank $2.
worker_of() {
  for pid in $(pgrep -P "$1"); do
    tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx "RANK=$2" && { echo "$pid"; return; }
  done
}
# converges NAME: waits for the launcher started last and checks how its job ended.
converges() {
  wait "$launcher"
  local code=$? took=$((SECONDS - started))
  [ "$code" = 0 ] || fail "$1: exit code $code after a restart"
  [ "$took" -lt "$bound" ] || fail "$1: took $took s (restarts must not wait out LOOM_TIMEOUT)"
  grep -q "restarting the workers (1 of 1)" "$dir/log" || fail "$1: the workers were not restarted"
}

# Rank 1 of the first attempt dies before it builds its communicator.
cat > "$dir/before_init.sh" <<WORKER
if [ "\${LOOM_RESTART_COUNT:-0}" = 0 ] && [ "\$RANK" = 1 ]; then sleep 0.3; exit 3; fi
exec "$perf" -b 1M -e 1M -n 5 -w 1
WORKER
started=$SECONDS
"$loomrun" --nproc-per-node 2 --max-restarts 1 sh "$dir/before_init.sh" > "$dir/log" 2>&1 &
launcher=$!
converges "dies before init"

# Rank 1 of the first attempt fails right after init() (a root outside the world).
cat > "$dir/after_init.sh" <<WORKER
if [ "\$LOOM_RESTART_COUNT" = 0 ] && [ "\$RANK" = 1 ]; then exec "$perf" -o broadcast -R 99; fi
exec "$perf" -o broadcast -b 1M -e 1M -n 5 -w 1
WORKER
started=$SECONDS
"$loomrun" --nproc-per-node 2 --max-restarts 1 --grace 1 sh "$dir/after_init.sh" > "$dir/log" 2>&1 &
launcher=$!
converges "dies after init"
grep -q "root 99 outside" "$dir/log" || fail "dies after init: rank 1 did not fail after init()"

# Rank 1 is SIGKILLed once rank 0 has finished a size: both are inside the loop of collectives.
cat > "$dir/mid_collective.sh" <<WORKER
if [ "\$LOOM_RESTART_COUNT" = 0 ]; then exec "$perf" -b 8 -e 64M -n 50 -w 0; fi
exec "$perf" -b 8 -e 1K -n 5 -w 1
WORKER
started=$SECONDS
"$loomrun" --nproc-per-node 2 --max-restarts 1 --grace 1 sh "$dir/mid_collective.sh" > "$dir/log" 2>&1 &
launcher=$!
wait_for 30 'grep -Eq "^\[0\] +8 " "$dir/log"' 0.01 || fail "mid-collective: rank 0 finished no size"
victim=$(worker_of "$launcher" 1)
[ -n "$victim" ] || fail "mid-collective: no rank 1 to kill"
kill -KILL "$victim"
converges "killed mid-collective"

# Rank 0 is SIGKILLed while it writes a snapshot: caught (SIGSTOP) while its temporary file
# exists; the restarted run resumes from the last complete snapshot, removes the dead writer's
# temporary file, and ends with the parameters of a run that never failed.
export LOOM_RUN_ID=restart-test
train_args=(--layers 256,2048,2048,10 --samples 4096 --batch-size 32 --epochs 2 --seed 3
            --calibrate-steps 0)
"$loomrun" --nproc-per-node 2 "$train" "${train_args[@]}" --save-params "$dir/uninterrupted.bin" \
  > "$dir/log" 2>&1 || fail "the uninterrupted training run failed"
started=$SECONDS
"$loomrun" --nproc-per-node 2 --max-restarts 1 --grace 1 "$train" "${train_args[@]}" \
  --snapshot "$dir/snap" --save-every 5 --save-params "$dir/resumed.bin" > "$dir/log" 2>&1 &
launcher=$!
temp_file() { ls "$dir/snap"/.snapshot-*.tmp.* 2>/dev/null | head -1; }
wait_for 30 '[ -n "$(ls "$dir/snap"/snapshot-*.loom 2>/dev/null)" ]' 0.01 || fail "during a save: no first snapshot"
writer=""
for _ in $(seq 20); do
  wait_for 30 '[ -n "$(temp_file)" ]' 0.01 || fail "during a save: no snapshot was being written"
  writer=$(worker_of "$launcher" 0)
  kill -STOP "$writer"
  [ -n "$(temp_file)" ] && break  # stopped mid-save
  kill -CONT "$writer"
  writer=""
done
[ -n "$writer" ] || fail "during a save: rank 0 was never caught writing"
left=$(temp_file)
kill -KILL "$writer"
converges "killed during a save"
grep -q "resumed at epoch" "$dir/log" || fail "during a save: the restarted run did not resume"
[ ! -e "$left" ] || fail "during a save: the dead writer's $left is still there"
cmp -s "$dir/uninterrupted.bin" "$dir/resumed.bin" || fail "during a save: other parameters at the end"
echo "restarts: all converged"
