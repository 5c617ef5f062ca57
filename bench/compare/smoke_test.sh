#!/usr/bin/env bash
# The comparison harness end to end, quickly: 2 ranks, all-reduce at 8 B and 1 MiB and all-to-all
# at 1 MiB, one repetition, every library built here (Loom natively and without AVX-512), then
# the tables; LOOM_AVX512_DISABLE keeps Loom's kernels off AVX-512; the cliff check flags exactly
# the drops above its threshold.
#   bench/compare/smoke_test.sh BUILD_DIR
set -uo pipefail
build=$1
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

python3 "$here/compare.py" run --build "$build" --reps 1 --ranks 2 --sizes "8 1M" \
  --alltoall-sizes 1M --iters-scale 0.05 --kernels both --far-retries 0 --out "$out" >"$out/stdout" 2>"$out/stderr" ||
  { rc=$?; tail -20 "$out/stderr"; cat "$out/runs.log"; fail "compare.py run exited $rc"; }
tables=$out/tables.md results=$out/results.csv

# Every library that is built has a measured row per configuration; the others are named as skipped.
expect() {  # impl transport op bytes
  grep -qE "^1,$1,$2,$3,2,$4,[0-9]+,[0-9]+,[0-9.]+,[0-9.]+," "$results" ||
    fail "no measurement of $1 over $2, $3 at $4 B"
}
for t in shm tcp; do
  for impl in loom loom-avx2; do
    expect "$impl" $t allreduce 8; expect "$impl" $t allreduce 1048576; expect "$impl" $t alltoall 1048576
  done
done
grep -q '^1,loom,shm,allreduce,2,1048576,.*over shm,' "$results" || fail "Loom's choice not recorded"
if [ -x "$build/bench/compare/mpi_bench" ] && command -v mpirun >/dev/null; then
  expect mpi-vader shm allreduce 1048576; expect mpi-tcp tcp allreduce 1048576
  expect mpi-tcp tcp alltoall 1048576
else
  grep -q "Note: mpi: skipped" "$tables" || fail "a missing OpenMPI driver is not noted"
fi
if [ -x "$build/bench/compare/gloo_bench" ]; then
  for algo in ring ring_chunked halving_doubling bcube allreduce_ring allreduce_bcube; do
    expect "gloo:$algo" tcp allreduce 1048576
  done
  expect gloo:alltoall tcp alltoall 1048576
fi
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  expect torch-gloo tcp allreduce 1048576; expect torch-gloo tcp alltoall 1048576
else
  grep -q "Note: torch: skipped" "$tables" || fail "a missing PyTorch is not noted"
fi

# The tables: one per configuration, a ratio in each, the limits measured in the run.
for c in "2 ranks, shm: f32 sum all-reduce" "2 ranks, tcp: f32 sum all-reduce" \
         "2 ranks, shm: all-to-all" "2 ranks, tcp: all-to-all"; do
  grep -q "^### $c" "$tables" || fail "no table for $c"
done
if grep -qE '^1,(mpi|gloo|torch)' "$results"; then
  # A figure from a launch with the cores far apart carries †, one while the host was slow ‡.
  grep -qE '^\| 1 MiB \|.*\| \*\*[0-9.]+\*\* \([0-9.]+†?‡?\) \| \*\*[0-9.]+\*\* \([0-9.]+†?‡?\) \|' "$tables" ||
    fail "no ratios for Loom and Loom (AVX2) at 1 MiB"
fi
if [ -x "$build/bench/compare/memcpy_bandwidth" ]; then  # built with -DLOOM_BUILD_BENCH=ON
  grep -qE '^\| single-thread memcpy \(GB/s\) \| [0-9.]+ \|' "$tables" || fail "memcpy not measured"
  # memcpy at each working set, in the same repetition, a column of the tables.
  expect memcpy-ws - allreduce 1048576; expect memcpy-ws - alltoall 1048576
  grep -A4 '^### 2 ranks, tcp: f32 sum all-reduce' "$tables" | grep '| memcpy at the working set (GB/s) |' >/dev/null ||
    fail "the tcp table has no memcpy at the working set"
fi
# The targets: every covered cell listed; one repetition is no figure.
grep -q '^## Targets' "$tables" || fail "no targets"
grep -qE '^\| Loom, allreduce 2 ranks shm 1 MiB \| >= 1.5x .* \| not judged: 1 repetition\(s\), a figure needs 3 \|$' "$tables" ||
  fail "a one-repetition cell was judged"
if [ -x "$build/bench/compare/copy_footprint" ]; then
  expect copy-bound - allreduce 1048576
  grep -A4 '^### 2 ranks, shm: f32 sum all-reduce' "$tables" | grep '| memory bound | Loom ÷ memory bound |' >/dev/null ||
    fail "the shm table has no memory bound"
  grep -A8 '^### 2 ranks, shm: f32 sum all-reduce' "$tables" | grep -E '^\| 1 MiB \|.*\| [0-9.]+ \| [0-9.]+ \|$' >/dev/null ||
    fail "no fraction of the memory bound at 1 MiB"
fi
if [ -x "$build/bench/compare/core_to_core" ] && [ "$(nproc)" -ge 2 ]; then
  grep -qE '^Placement: core-to-core round trip [0-9]+-[0-9]+ ns around [0-9]+ launches' "$tables" ||
    fail "the cores' placement is not measured around the launches"
fi
if [ -x "$build/bench/compare/loopback_footprint" ]; then
  grep -qE '^Host pace: the loopback exchange at 2 ranks and 2 MiB .* ran [0-9]+-[0-9]+ us around [0-9]+ launches' "$tables" ||
    fail "the host's pace is not measured around the launches"
  grep -qE '^1,loom,shm,allreduce,2,1048576,.*,[0-9.]+,(steady|slow)' "$results" ||
    fail "the host's pace is not recorded with the launch"
fi
if command -v iperf3 >/dev/null; then
  grep -qE '^\| iperf3 loopback, one stream \(GB/s\) \| [0-9.]+ \|' "$tables" ||
    fail "iperf3 not measured"
  grep -qE '^\| iperf3 loopback, two opposite streams at once, each \(GB/s\) \| [0-9.]+ \|' "$tables" ||
    fail "iperf3's two opposite streams not measured"
fi

# LOOM_AVX512_DISABLE=1: the kernels dispatch below AVX-512 (Highway's AVX3 targets).
target() {
  LOOM_DEBUG=INFO "$@" "$build/tools/loomrun" --nproc-per-node 2 "$build/bench/loom-perf" -b 8 -e 8 \
    -n 1 -w 0 2>&1 | grep -o 'reduction kernels [A-Za-z0-9_]*' | head -1 | awk '{print $3}'
}
without=$(target env LOOM_AVX512_DISABLE=1)
[ -n "$without" ] || fail "the kernels' target is not logged"
case "$without" in AVX3*) fail "LOOM_AVX512_DISABLE=1 still dispatches to $without" ;; esac
if grep -qw avx512bw /proc/cpuinfo; then
  native=$(target env)
  case "$native" in AVX3*) ;; *) fail "this CPU has AVX-512 but the kernels run $native" ;; esac
fi

# The cliff check (the rules themselves: rules_test.py): 1.0 -> 1.2 -> 1.0 (-17%) -> 0.95 (-5%)
# GB/s, no memory bound measured, flags 256 KiB only, judged on busbw.
{
  echo "rep,impl,transport,op,ranks,bytes,iters,warmup,time_us,busbw_gbps,choice,error"
  for rep in 1 2; do
    echo "$rep,loom,shm,allreduce,2,65536,5,2,1,1.0,ring,"
    echo "$rep,loom,shm,allreduce,2,131072,5,2,1,1.2,ring,"
    echo "$rep,loom,shm,allreduce,2,262144,5,2,1,1.0,ring in slices of 140 KiB,"
    echo "$rep,loom,shm,allreduce,2,524288,5,2,1,0.95,ring,"
  done
} >"$out/synthetic.csv"
cliffs=$(python3 "$here/compare.py" report "$out/synthetic.csv" --cliffs)
[ $? = 1 ] || fail "a cliff should make the check exit 1"
[ "$(echo "$cliffs" | grep -c '^- ')" = 1 ] || fail "expected one cliff: $cliffs"
grep -q '^- Loom shm, 2 ranks: 128 KiB → 256 KiB: 1.20 → 1.00 GB/s; no yardstick measured at this step: judged on busbw: −17%' <<<"$cliffs" ||
  fail "the cliff is not at 256 KiB: $cliffs"
grep -q 'ring → ring in slices of 140 KiB' <<<"$cliffs" || fail "the cliff names no choices"

# With the memory bound measured, the fraction of it is judged, over shm and tcp alike (tcp without
# the loopback exchange): 8 -> 5 GB/s against a bound of 40 -> 20 keeps more of it (no cliff);
# 5 -> 2 against 20 -> 18 does not.
{
  echo "rep,impl,transport,op,ranks,bytes,iters,warmup,time_us,busbw_gbps,choice,error"
  for rep in 1 2; do
    echo "$rep,copy-bound,-,allreduce,2,4194304,5,2,1,40,,"
    echo "$rep,copy-bound,-,allreduce,2,8388608,5,2,1,20,,"
    echo "$rep,copy-bound,-,allreduce,2,16777216,5,2,1,18,,"
    echo "$rep,loom,shm,allreduce,2,4194304,5,2,1,8,ring,"
    echo "$rep,loom,shm,allreduce,2,8388608,5,2,1,5,ring,"
    echo "$rep,loom,shm,allreduce,2,16777216,5,2,1,2,ring,"
  done
} >"$out/bounded.csv"
for t in shm tcp; do
  sed "s/,loom,shm,/,loom,$t,/" "$out/bounded.csv" >"$out/bounded-$t.csv"
  bounded=$(python3 "$here/compare.py" report "$out/bounded-$t.csv" --cliffs)
  [ $? = 1 ] || fail "a fall of the fraction of the memory bound should make the check exit 1 ($t)"
  grep -q '^Cliffs (busbw ÷ the memory bound .* more than 15% below .*: 1$' <<<"$bounded" ||
    fail "expected one cliff ($t): $bounded"
  grep -q "^- Loom $t, 2 ranks: 8 MiB → 16 MiB: 5.00 → 2.00 GB/s; ÷ memory bound 0.25 → 0.11 (memory bound 20.00 → 18.00 GB/s): −56%" <<<"$bounded" ||
    fail "the fall at 16 MiB is not judged against the bound ($t): $bounded"
  grep -qF '| 16 MiB | 0.11 |' <<<"$bounded" || fail "no fraction of the memory bound ($t): $bounded"
  sed -i "/,loom,$t,allreduce,2,16777216,/s/,2,ring,\$/,16,ring,/" "$out/bounded-$t.csv"
  python3 "$here/compare.py" report "$out/bounded-$t.csv" --cliffs >/dev/null ||
    fail "falls the memory bound shares should pass the check ($t)"
done

# A fall in one launch's medians that the launches' own pairs do not show (a slow launch, rep 2 at
# 128 KiB) is no cliff: the check compares each repetition with itself.
{
  echo "rep,impl,transport,op,ranks,bytes,iters,warmup,time_us,busbw_gbps,choice,error"
  echo "1,loom,tcp,allreduce,2,65536,5,2,1,2.0,ring,"; echo "1,loom,tcp,allreduce,2,131072,5,2,1,1.0,ring,"
  echo "2,loom,tcp,allreduce,2,65536,5,2,1,2.0,ring,"; echo "2,loom,tcp,allreduce,2,131072,5,2,1,2.0,ring,"
  echo "3,loom,tcp,allreduce,2,65536,5,2,1,1.0,ring,"; echo "3,loom,tcp,allreduce,2,131072,5,2,1,1.0,ring,"
} >"$out/paired.csv"
python3 "$here/compare.py" report "$out/paired.csv" --cliffs >"$out/paired.txt" ||
  fail "one slow launch made a cliff: $(cat "$out/paired.txt")"

# The cliff check's sweep: Loom's sizes in one launch per transport, a row per size and repetition.
python3 "$here/compare.py" cliffs --build "$build" --reps 1 --ranks 2 --transports tcp --min 64K \
  --max 256K --iters-scale 0.05 --far-retries 0 --rounds 2 --out "$out/sweep" >"$out/sweep.stdout" 2>&1
[ $? -le 1 ] || { tail -20 "$out/sweep.stdout"; fail "compare.py cliffs failed"; }
for b in 65536 131072 262144; do
  grep -qE "^1,loom,tcp,allreduce,2,$b,[0-9]+,[0-9]+,[0-9.]+,[0-9.]+,.* for $b B over tcp" \
    "$out/sweep/results.csv" || fail "the sweep has no row for $b B, or not its choice"
  if [ -x "$build/bench/compare/loopback_footprint" ]; then
    grep -qE "^1,loopback-exchange,lo,allreduce,2,$b,[0-9]+,[0-9]+,[0-9.]+,[0-9.]+," \
      "$out/sweep/results.csv" || fail "the sweep has no loopback exchange at $b B"
  fi
done
[ "$(grep -c '/loom-perf .*-b 65536 -e 262144 .*--iter-bytes' "$out/sweep/runs.log")" = 1 ] ||
  fail "the sweep was not one launch"
grep -q '/loom-perf .*--rounds 2' "$out/sweep/runs.log" || fail "the sweep's turns (--rounds) did not reach loom-perf"

# --fresh-inputs reaches every driver, and rewriting the input leaves its values as they were.
python3 "$here/compare.py" run --build "$build" --reps 1 --ranks 2 --sizes 1M --alltoall-sizes "" \
  --transports tcp --iters-scale 0.05 --far-retries 0 --fresh-inputs --out "$out/fresh" \
  >"$out/fresh.stdout" 2>&1 ||
  { rc=$?; tail -20 "$out/fresh.stdout"; cat "$out/fresh/runs.log"; fail "compare.py run --fresh-inputs exited $rc"; }
grep -q 'fresh inputs (rewritten before every call)' "$out/fresh/tables.md" ||
  fail "the tables do not say the inputs were fresh"
# measured RUN IMPL: run $out/RUN has a measurement of IMPL over tcp at 2 ranks, 1 MiB.
measured() { grep -qE "^1,$2,tcp,allreduce,2,1048576,[0-9]+,[0-9]+,[0-9.]+,[0-9.]+," \
  "$out/$1/results.csv" || fail "no measurement of $2 in the $1 run"; }
measured fresh loom
if [ -x "$build/bench/compare/mpi_bench" ] && command -v mpirun >/dev/null; then measured fresh mpi-tcp; fi
if [ -x "$build/bench/compare/gloo_bench" ]; then measured fresh gloo:ring; fi
if /usr/bin/python3 -c "import torch" 2>/dev/null; then measured fresh torch-gloo; fi
[ "$(grep -c -- '--fresh-inputs\| fresh$' "$out/fresh/runs.log")" -ge 2 ] ||
  fail "--fresh-inputs did not reach the drivers' command lines"
# (copy_footprint measures the memory bound, not a library: it has no inputs to rewrite.)
unfresh=$(grep '^\$ ' "$out/fresh/runs.log" | grep -v -- '--fresh-inputs\| fresh$' | grep -v '/copy_footprint ' || true)
[ -z "$unfresh" ] || fail "a driver ran without --fresh-inputs: $(echo "$unfresh" | head -1)"
"$build/tools/loomrun" --nproc-per-node 2 --no-prefix "$build/bench/loom-perf" -b 1M -e 1M -n 3 -w 1 -c \
  --fresh-inputs --csv 2>&1 | grep -E '^1048576,.*,0$' >/dev/null || fail "--fresh-inputs changed the input"

# --cpu-bind cores reaches every launcher, and the drivers run bound.
python3 "$here/compare.py" run --build "$build" --reps 1 --ranks 2 --sizes 1M --alltoall-sizes "" \
  --transports tcp --libs "loom mpi gloo" --iters-scale 0.05 --far-retries 0 --cpu-bind cores \
  --out "$out/bound" >"$out/bound.stdout" 2>&1 ||
  { rc=$?; tail -20 "$out/bound.stdout"; fail "compare.py run --cpu-bind cores exited $rc"; }
grep -q 'ranks bound to CPUs' "$out/bound/tables.md" || fail "the tables do not say the ranks were bound"
measured bound loom
if [ -x "$build/bench/compare/mpi_bench" ] && command -v mpirun >/dev/null; then
  measured bound mpi-tcp
  grep -q '^\$ .*mpirun .*--bind-to none python3 .*/bind_local.py ' "$out/bound/runs.log" ||
    fail "OpenMPI's ranks were not bound"
fi
if [ -x "$build/bench/compare/gloo_bench" ]; then measured bound gloo:ring; fi
unbound=$(grep '^\$ .*/loomrun ' "$out/bound/runs.log" | grep -v -- '--cpu-bind cores' || true)
[ -z "$unbound" ] || fail "a loomrun launch without --cpu-bind cores: $(echo "$unbound" | head -1)"

# Placement: a repetition's near launch is kept over a far one; a far value left alone is marked.
{
  echo "rep,impl,transport,op,ranks,bytes,iters,warmup,time_us,busbw_gbps,choice,error,core_to_core_ns,placement"
  echo "1,loom,shm,allreduce,2,1048576,5,2,1,1.5,ring,,340,far"
  echo "1,loom,shm,allreduce,2,1048576,5,2,1,6.0,ring,,62,near"
  echo "1,mpi-vader,shm,allreduce,2,1048576,5,2,1,3.0,,,70,near"
  echo "2,loom,shm,allreduce,2,1048576,5,2,1,2.0,ring,,330,far"
  echo "2,mpi-vader,shm,allreduce,2,1048576,5,2,1,2.5,,,64,near"
} >"$out/placement.csv"
placed=$(python3 "$here/compare.py" report "$out/placement.csv") || fail "report of placement.csv failed"
grep -qF '| 1 MiB | 4.00 | 2.75 | 2.75 (OpenMPI vader) | **1.45** (2.00, 0.80†) |' <<<"$placed" ||
  fail "a near launch should replace its repetition's far one, a far one be marked: $placed"
grep -q '^Placement: .* 2 of 5 launches ran with the cores far apart (330-340 ns).* 1 per-repetition values are from a far launch' <<<"$placed" ||
  fail "the far launches are not counted: $placed"

# Pace: a repetition's steady launch is kept over a slow one; a slow value left alone is marked;
# a figure from a far and a slow launch carries both marks.
{
  echo "rep,impl,transport,op,ranks,bytes,iters,warmup,time_us,busbw_gbps,choice,error,core_to_core_ns,placement,pace_us,pace"
  echo "1,loom,shm,allreduce,2,1048576,5,2,1,1.5,ring,,60,near,900,slow"
  echo "1,loom,shm,allreduce,2,1048576,5,2,1,6.0,ring,,62,near,330,steady"
  echo "1,mpi-vader,shm,allreduce,2,1048576,5,2,1,3.0,,,70,near,340,steady"
  echo "2,loom,shm,allreduce,2,1048576,5,2,1,2.0,ring,,330,far,350,steady"
  echo "2,mpi-vader,shm,allreduce,2,1048576,5,2,1,2.5,,,64,near,800,slow"
  echo "3,loom,shm,allreduce,2,1048576,5,2,1,4.0,ring,,66,near,310,steady"
  echo "3,mpi-vader,shm,allreduce,2,1048576,5,2,1,2.0,,,64,near,320,steady"
} >"$out/pace.csv"
paced=$(python3 "$here/compare.py" report "$out/pace.csv") || fail "report of pace.csv failed"
grep -qF '| 1 MiB | 4.00 | 2.50 | 2.50 (OpenMPI vader) | **1.60** (2.00, 0.80†‡, 2.00) |' <<<"$paced" ||
  fail "a steady launch should replace its repetition's slow one, a slow one be marked: $paced"
grep -q '^Host pace: .* ran 310-350 us around 5 launches; 2 of 7 launches ran while it took more than 1.3x the run.s fastest (800-900 us).* 1 per-repetition values are from a slow launch' <<<"$paced" ||
  fail "the slow launches are not counted: $paced"

# A fall is judged over the repetitions whose launches of both sizes ran at one pace of the host:
# the -50% of a slow launch against a steady one is not a cliff, and is shown marked; with every
# repetition's larger size slow and its smaller steady, the fall is judged over all of them and is
# one; where both sizes ran slow, the repetition counts.
pace_sweep() {  # the 2 MiB launch's pace in repetitions 1 2 3
  echo "rep,impl,transport,op,ranks,bytes,iters,warmup,time_us,busbw_gbps,choice,error,core_to_core_ns,placement,pace_us,pace"
  local rep=1
  for pace in "$@"; do
    echo "$rep,loom,tcp,allreduce,2,1048576,5,2,1,2.0,ring,,60,near,330,steady"
    [ "$pace" = slow ] && echo "$rep,loom,tcp,allreduce,2,2097152,5,2,1,1.0,ring,,60,near,900,slow" ||
      echo "$rep,loom,tcp,allreduce,2,2097152,5,2,1,2.0,ring,,60,near,340,steady"
    rep=$((rep + 1))
  done
}
pace_sweep steady steady slow >"$out/pace-cliff.csv"
pace_cliffs=$(python3 "$here/compare.py" report "$out/pace-cliff.csv" --cliffs) ||
  fail "a fall in a slow spell alone should not be a cliff: $pace_cliffs"
pace_sweep steady slow slow >"$out/pace-cliff.csv"
pace_cliffs=$(python3 "$here/compare.py" report "$out/pace-cliff.csv" --cliffs) ||
  fail "a fall in slow spells, with a steady repetition that did not fall, should not be a cliff: $pace_cliffs"
pace_sweep slow slow slow >"$out/pace-cliff.csv"
pace_cliffs=$(python3 "$here/compare.py" report "$out/pace-cliff.csv" --cliffs)
[ $? = 1 ] || fail "a fall in every repetition should be a cliff, slow or not: $pace_cliffs"
grep -q '^- Loom tcp, 2 ranks: 1 MiB → 2 MiB: .*per repetition -50%‡, -50%‡, -50%‡)' <<<"$pace_cliffs" ||
  fail "the slow repetitions are not marked: $pace_cliffs"
pace_sweep steady slow slow | sed '/^3,loom,tcp,allreduce,2,1048576,/s/,330,steady/,900,slow/' >"$out/pace-cliff.csv"
pace_cliffs=$(python3 "$here/compare.py" report "$out/pace-cliff.csv" --cliffs)
[ $? = 1 ] || fail "a fall between two slow launches should count: $pace_cliffs"
grep -q '^- Loom tcp, 2 ranks: 1 MiB → 2 MiB: .*per repetition +0%, -50%‡, -50%‡, judged over the 2 whose launches ran at one pace)' <<<"$pace_cliffs" ||
  fail "the fall should be judged over the two repetitions at one pace: $pace_cliffs"
echo "harness OK"
