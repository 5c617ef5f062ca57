#!/usr/bin/env bash
# loom-perf --rounds: every size timed in turns over the sweep still makes one row, of all its
# calls, in order, and its checked call is exact, in place and out of place.
set -u
loomrun=$1 perf=$2
source "$(dirname "$0")/lib.sh"
on_failure() { show_logs +1 "$dir/out"; }

for op in allreduce allgather; do
  for place in "" --inplace; do
    timeout 100 "$loomrun" --nproc-per-node 3 --no-prefix "$perf" -o $op -b 64K -e 1M -n 5 -w 1 \
      --rounds 3 $place --check --json "$dir/rows.json" >"$dir/out" 2>&1 || fail "$op $place exited $?"
    grep -q "in 3 turns over the sizes" "$dir/out" || fail "$op $place: the header does not say the turns"
    grep -q "out of bounds values : 0 OK" "$dir/out" || fail "$op $place: wrong results"
    # One row a size, in order, each of all 5 timed calls.
    python3 - "$dir/rows.json" <<'PY' || fail "$op $place: the rows"
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
sizes = [r["size"] for r in rows]  # whole blocks of 3 ranks' elements for the all-gather
assert len(sizes) == 5 and sizes == sorted(set(sizes)) and 65532 <= sizes[0] <= 65536, sizes
assert all(r["timed_calls"] == 5 and r["wrong"] == 0 and r["time_us"] > 0 for r in rows), rows
PY
  done
done
# --iter-bytes: a size with fewer calls than turns takes part in as many turns as it has calls.
timeout 100 "$loomrun" --nproc-per-node 2 --no-prefix "$perf" -b 64K -e 1M -n 8 -w 2 \
  --iter-bytes 2M --rounds 4 --json "$dir/rows.json" >"$dir/out" 2>&1 || fail "--iter-bytes exited $?"
python3 - "$dir/rows.json" <<'PY' || fail "--iter-bytes: the rows"
import json, sys
calls = [r["timed_calls"] for r in json.load(open(sys.argv[1]))["rows"]]
assert calls == [8, 8, 8, 4, 2], calls
PY
# Turns need per-op timing.
"$perf" --rounds 2 --mean >"$dir/out" 2>&1 && fail "--rounds with --mean was accepted"
grep -q "needs per-op timing" "$dir/out" || fail "--rounds with --mean: no reason given"
echo "loom-perf --rounds: ok"
