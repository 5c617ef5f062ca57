#!/usr/bin/env bash
# loom-train on 2 ranks: progress and summary from rank 0 only, a falling loss, compression
# hooks and accumulation run, --no-ddp alone, bad flags refused with exit code 2, and a FIFO in
# the snapshot folder refused at once.
set -u
loomrun=$1 train=$2
source "$(dirname "$0")/lib.sh"
out=""
on_failure() { echo "$out"; }
small=(--layers 64,128,10 --samples 4096 --calibrate-steps 2)

out=$("$loomrun" --nproc-per-node 2 "$train" "${small[@]}" --epochs 4 2>&1) || fail "training failed"
echo "$out" | grep -q '^\[0\] epoch 4/4  step [0-9]*  loss' || fail "no progress line for epoch 4"
echo "$out" | grep -q '^\[1\] epoch' && fail "rank 1 printed progress"
echo "$out" | grep -Eq '^\[0\] summary: [0-9]+ samples/s \(2 rank' || fail "no summary"
echo "$out" | grep -q 'exposed communication' || fail "no step time split"
echo "$out" | grep -q 'scaling efficiency: ' || fail "no scaling efficiency"
curve=$(echo "$out" | sed -n 's/^\[0\] loss per epoch: //p')
awk -v c="$curve" 'BEGIN { n = split(c, l, " "); exit !(n == 4 && l[4] < 0.8 * l[1]) }' \
  || fail "the loss did not fall by 20% over 4 epochs: $curve"

for extra in "--comm-hook fp16" "--comm-hook bf16" "--accumulate 3" "--optimizer adamw --lr 0.001"; do
  # shellcheck disable=SC2086
  out=$("$loomrun" --nproc-per-node 2 "$train" "${small[@]}" --steps 20 $extra 2>&1) || fail "$extra failed"
done
out=$("$train" --no-ddp "${small[@]}" --steps 20 2>&1) || fail "--no-ddp failed"
echo "$out" | grep -q "no communication" || fail "--no-ddp should say it does not communicate"

# A FIFO named as the newest snapshot: every rank ends at once with an error naming it (rank 0
# hung in open(2) for ever, the others in the broadcast).
folder=$dir/fifo
mkdir "$folder"
mkfifo "$folder/snapshot-99999999.loom"
start=$SECONDS
out=$(timeout 60 "$loomrun" --nproc-per-node 2 "$train" "${small[@]}" --snapshot "$folder" --steps 20 2>&1)
rc=$?
[ "$rc" = 1 ] || fail "a FIFO in the snapshot folder: exit code $rc, not 1 (124: hung)"
[ $((SECONDS - start)) -lt 30 ] || fail "the FIFO took $((SECONDS - start)) s to be refused"
refusal="loom-train: resume_from_newest: rank 0: $folder/snapshot-99999999.loom: refused: a FIFO"
echo "$out" | grep -q "^\[[01]\] $refusal" || fail "no rank names the FIFO"
# Rank 1 learns the refusal from rank 0, and both name it. Under loomrun the rank that exits first
# has the other stopped, perhaps before it printed; so the ranks run here without a launcher as
# well, and each must exit 1 naming the FIFO.
port=$(free_port)
pids=()
for r in 0 1; do
  timeout 60 env MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" RANK=$r WORLD_SIZE=2 \
    "$train" "${small[@]}" --snapshot "$folder" --steps 20 > "$dir/fifo$r" 2>&1 &
  pids+=($!)
done
for r in 0 1; do
  rc=0
  wait "${pids[$r]}" || rc=$?
  [ "$rc" = 1 ] || fail "a FIFO, rank $r without a launcher: exit code $rc, not 1 (124: hung)"
  grep -q "$refusal" "$dir/fifo$r" || fail "rank $r does not name the FIFO: $(cat "$dir/fifo$r")"
done

for bad in "--layers 10" "--optimizer lbfgs" "--comm-hook zip" "--batch-size 0" "--data csv"; do
  # shellcheck disable=SC2086
  out=$("$train" --no-ddp $bad 2>&1)
  [ $? = 2 ] || fail "'$bad' should exit 2"
done
out=$("$train" --no-ddp --layers 10,5 --data csv:/nonexistent.csv 2>&1)
[ $? = 1 ] && echo "$out" | grep -q "cannot open /nonexistent.csv" || fail "a missing data file should be named"
echo "loom-train: all checks passed"
