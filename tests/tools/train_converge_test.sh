#!/usr/bin/env bash
# loom-train's defaults converge over long runs: 60 epochs at 1 rank, at 2 ranks, and at 3 ranks
# of which one is killed after epoch 10 (--on-failure shrink): each run's last epoch loss is
# below its fifth's. The learning rate is fitted to the global batch (0.01 per 32 samples); the
# old fixed default (0.05) made the loss turn back up after a few epochs at these batches. After
# the shrink the rate is scaled by 2/3 with the global batch (--lr-scale-on-shrink). A rate too
# high for the batch makes the loss rise, and rank 0 warns.
set -u
loomrun=$1 train=$2
source "$(dirname "$0")/lib.sh"
on_failure() { show_logs 1000 "$dir"/*.log; }
args=(--layers 64,256,256,10 --samples 4096 --epochs 60 --seed 1 --calibrate-steps 0)
# The loss of epoch 60 below that of epoch 5, from "loss per epoch: l1 l2 ...".
converged() {  # log
  awk '/loss per epoch:/ { sub(/.*loss per epoch: /, ""); n = split($0, l, " ")
                           if (n == 60 && l[60] + 0 < l[5] + 0) ok = 1
                           print "epochs " n ": fifth " l[5] ", last " l[n] }
       END { exit !ok }' "$dir/$1.log"
}

timeout 300 "$loomrun" --nproc-per-node 1 "$train" "${args[@]}" --batch-size 32 > "$dir/one.log" 2>&1 ||
  fail "1 rank failed"
grep -q "sgd lr 0.01 (0.01 per 32 samples of the global batch of 32)" "$dir/one.log" ||
  fail "1 rank of 32: the learning rate is not 0.01, fitted to the batch"
converged one || fail "1 rank: the loss of epoch 60 is not below epoch 5's"

timeout 300 "$loomrun" --nproc-per-node 2 "$train" "${args[@]}" --batch-size 16 > "$dir/two.log" 2>&1 ||
  fail "2 ranks failed"
converged two || fail "2 ranks: the loss of epoch 60 is not below epoch 5's"

# Rank 2 of 3 is killed once rank 0 has reported epoch 10.
cat > "$dir/victim.sh" <<'SH'
#!/bin/sh
if [ "$RANK" = 2 ]; then
  (for i in $(seq 3000); do grep -q 'epoch 10/60' "$WATCH_LOG" && break; sleep 0.1; done
   kill -KILL $$) &
fi
exec "$@"
SH
chmod +x "$dir/victim.sh"
WATCH_LOG="$dir/shrink.log" timeout 400 "$loomrun" --nproc-per-node 3 --on-failure shrink \
  "$dir/victim.sh" "$train" "${args[@]}" --batch-size 16 > "$dir/shrink.log" 2>&1 ||
  fail "3 ranks, one killed: the survivors did not finish"
grep -qE "going on with 2 of 3 ranks .* effective batch 32 \(was 48\), lr 0.01 \(was 0.015\)" \
  "$dir/shrink.log" || fail "no shrink, or the learning rate was not scaled with the batch"
converged shrink || fail "after a shrink: the loss of epoch 60 is not below epoch 5's"

# Too high a rate for a batch of 32: the loss rises epoch after epoch, and rank 0 says so.
timeout 300 "$train" --no-ddp "${args[@]}" --batch-size 32 --lr 0.1 > "$dir/high.log" 2>&1 ||
  fail "--lr 0.1 failed"
grep -qE "^loom-train: warning: the epoch loss rose 3 epochs in a row \(.*\): the learning rate 0.1 may be too high for the global batch of 32" \
  "$dir/high.log" || fail "no warning about a rising loss at --lr 0.1"
echo "loom-train: the defaults converge over 60 epochs at 1, 2 and 3 -> 2 ranks"
