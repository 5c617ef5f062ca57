#!/usr/bin/env bash
# loom-tune end to end: it sweeps a 2-rank job, writes an entry keyed by this machine, transport
# and shape, a second sweep replaces that entry rather than adding one, --dry-run writes nothing,
# and a later job over the same shape loads the entry (rank 0 logs it).
set -u
loomrun=$1 tune=$2 perf=$3
source "$(dirname "$0")/lib.sh"
on_failure() { show_logs 30 "$dir/log"; }
table=$dir/cache/tune.txt
export LOOM_TIMEOUT=60

"$loomrun" --nproc-per-node 2 "$tune" -b 8 -e 256K -f 8 --rounds 1 --confirm 2 --ms 2 \
  --file "$table" >"$dir/log" 2>&1 || fail "loom-tune exited $?"
grep -q "wrote the entry" "$dir/log" || fail "no entry written"
grep -q " confirmed$" "$dir/log" || fail "the report has no confirmation column"
# A size the table names was confirmed: its line shows the confirmation's gain.
if grep -q -- "<- table" "$dir/log"; then
  grep -- "<- table" "$dir/log" | grep -qvE " [0-9.]+x +[0-9.]+x  <- table$" &&
    fail "a size in the table without its confirmation: $(grep -- '<- table' "$dir/log")"
fi
entries() { grep -v '^#' "$table" | grep -c $'\tshm\t2x1\t'; }
[ "$(entries)" = 1 ] || fail "expected one shm 2x1 entry: $(cat "$table")"
grep -q "allreduce" "$dir/log" || fail "no report"

LOOM_TUNE_FILE=$table "$loomrun" --nproc-per-node 2 "$tune" -b 64K -e 64K --rounds 1 --ms 2 \
  >"$dir/log" 2>&1 || fail "second loom-tune exited $?"
[ "$(entries)" = 1 ] || fail "the second sweep added an entry: $(cat "$table")"
before=$(cat "$table")
"$loomrun" --nproc-per-node 2 "$tune" -b 8 -e 8 --rounds 1 --file "$table" --dry-run \
  >"$dir/log" 2>&1 || fail "--dry-run exited $?"
[ "$(cat "$table")" = "$before" ] || fail "--dry-run changed the table"

# A table whose entry forces the ring at every size: the job's choice names it.
rules=$(grep -v '^#' "$table" | cut -f6)
sed -i "s|\t2x1\t${rules}\$|\t2x1\tallreduce:ring@32K|" "$table"
LOOM_TUNE_FILE=$table LOOM_DEBUG=INFO "$loomrun" --nproc-per-node 2 "$perf" -b 1M -e 1M -n 2 -w 1 \
  --check >"$dir/log" 2>&1 || fail "loom-perf with the table exited $?"
grep -q "tuning table $table: allreduce:ring@32K" "$dir/log" || fail "rank 0 did not log the entry"
grep -q "ring (tuning table) in slices of 32 KiB" "$dir/log" || fail "the entry did not choose"
grep -q "FAILED" "$dir/log" && fail "wrong results"

"$tune" --ops nosuch >"$dir/log" 2>&1
[ $? = 2 ] || fail "a bad --ops did not exit 2"
echo "PASS"
