#!/usr/bin/env bash
# loom-train end to end: a worker killed (SIGKILL) mid-training under loomrun --max-restarts is
# restarted, every rank resumes from the newest snapshot, and the final parameters equal an
# uninterrupted run's bit for bit. Also: LOOM_TRACE writes one trace per rank.
set -u
loomrun=$1 train=$2
source "$(dirname "$0")/lib.sh"
on_failure() { show_logs +1 "$dir/log"; }
export LOOM_RUN_ID=resume-test  # the snapshots' names do not depend on the environment (Slurm)
common=(--layers 256,1024,1024,10 --samples 8192 --batch-size 32 --epochs 2 --seed 7 --calibrate-steps 0)

"$loomrun" --nproc-per-node 2 "$train" "${common[@]}" --save-params "$dir/uninterrupted.bin" > "$dir/log" 2>&1 \
  || fail "the uninterrupted run failed"

"$loomrun" --nproc-per-node 2 --max-restarts 1 --grace 1 "$train" "${common[@]}" --snapshot "$dir/snap" \
  --save-every 10 --save-params "$dir/resumed.bin" > "$dir/log" 2>&1 &
launcher=$!
for _ in $(seq 1 600); do [ -f "$dir/snap/snapshot-resume-test-20.loom" ] && break; sleep 0.05; done
[ -f "$dir/snap/snapshot-resume-test-20.loom" ] || fail "no snapshot after 30 s"
killed=""
for pid in $(pgrep -P "$launcher"); do
  if tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx 'RANK=1'; then kill -KILL "$pid" && killed=$pid; fi
done
[ -n "$killed" ] || fail "could not find rank 1 to kill"
wait "$launcher" || fail "the restarted run failed (exit $?)"
grep -q "restarting the workers" "$dir/log" || fail "loomrun did not restart the workers"
grep -q "resumed at epoch" "$dir/log" || fail "the workers did not resume from a snapshot"
cmp -s "$dir/uninterrupted.bin" "$dir/resumed.bin" || fail "the resumed run ended with other parameters"

LOOM_TRACE="$dir/trace.json" "$loomrun" --nproc-per-node 2 "$train" --layers 32,64,10 --samples 512 \
  --batch-size 32 --steps 3 --calibrate-steps 0 --bucket-cap-mb 0.001 --first-bucket-mb 0.001 > "$dir/log" 2>&1 \
  || fail "the traced run failed"
for r in 0 1; do
  f="$dir/trace.rank$r.json"
  [ -f "$f" ] || fail "no trace $f"
  for event in '"name":"backward fc1"' '"name":"optimizer step"' '"name":"all_reduce #' '"traceEvents"'; do
    grep -q "$event" "$f" || fail "$f lacks $event"
  done
done
echo "loom-train: resumed bit for bit after a kill; traces written"
