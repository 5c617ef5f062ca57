#!/usr/bin/env bash
# loom-train reports loss and accuracy over every rank's batches: 2 ranks of batch 8 train on
# exactly the samples of one process with batch 16 (the sampler deals them out in turn), so
# their epoch lines and --eval-every lines must match that process's (to rounding), not rank
# 0's half. --eval-every holds the last --eval-fraction of the data out of training.
set -u
loomrun=$1 train=$2
source "$(dirname "$0")/lib.sh"
on_failure() { show_logs +1 "$dir"/*.log; }
args=(--layers 16,64,4 --samples 320 --epochs 3 --seed 5 --calibrate-steps 0 --eval-every 6
      --eval-fraction 0.2)
"$train" --no-ddp --batch-size 16 "${args[@]}" > "$dir/one.log" 2>&1 || fail "one process failed"
"$loomrun" --nproc-per-node 2 --no-prefix "$train" --batch-size 8 "${args[@]}" > "$dir/two.log" 2>&1 ||
  fail "2 ranks failed"
# "epoch 1/3  step 16  loss 1.2345  acc 0.500 ..." and "eval  step 6  loss ..  acc .. (64 held-out...)"
values() { grep -E "^(epoch|eval) " "$1" | awk '{print $1, $4, $6, $8}'; }
[ "$(values "$dir/one.log" | grep -c '^epoch')" = 3 ] || fail "one process: not 3 epoch lines"
[ "$(values "$dir/one.log" | grep -c '^eval')" -ge 5 ] || fail "one process: too few eval lines"
grep -q "(64 held-out samples)" "$dir/one.log" || fail "--eval-fraction 0.2 of 320 is not 64 samples"
grep -q "step 16 " "$dir/one.log" || fail "training did not run on the 256 samples left (16 steps of 16)"
paste <(values "$dir/one.log") <(values "$dir/two.log") | awk '
  { if ($1 != $5 || $2 != $6) { print "line " NR ": " $0; bad = 1; next }
    if ((($3 - $7) ^ 2) > 4e-6 || (($4 - $8) ^ 2) > 4e-6) { print "line " NR " differs: " $0; bad = 1 } }
  END { if (NR < 8) { print "only " NR " lines"; bad = 1 }; exit bad }' > "$dir/diff" ||
  fail "2 ranks do not report the average over both: $(cat "$dir/diff")"
echo "loom-train: loss and accuracy averaged over ranks, eval on the held-out split"
