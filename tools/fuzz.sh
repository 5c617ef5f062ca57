#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a while, as many at
# once as there are cores.
#   tools/fuzz.sh                 60 s per target
#   tools/fuzz.sh --seconds 3600  longer runs; corpora are kept in build-fuzz/corpus/<target>
# Exits non-zero if any target found a crash, leak, timeout or sanitizer report; the failing input
# is left in build-fuzz/ (crash-*, leak-*, timeout-*).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=60
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    *) echo "usage: tools/fuzz.sh [--seconds N]"; exit 2 ;;
  esac
done
tools/deps.sh
build=build-fuzz
mkdir -p "$build"
cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" -DLOOM_FUZZ=ON -DLOOM_CUDA=OFF -DLOOM_WERROR=ON -DLOOM_BUILD_TESTS=OFF -DLOOM_BUILD_BENCH=OFF >/dev/null
targets=()
for seeds in tests/fuzz/seeds/*/; do targets+=("$(basename "$seeds")_fuzz"); done
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"

# The starting inputs are the seeds ctest's short runs use (tests/fuzz/seeds/<target>/): store
# requests and replies, FileStore logs, a challenge, TCP frames and shm pages, snapshots, abort
# records, shrink decisions, topology records, rendezvous node lines, tuning-table lines and
# window ranges.
for t in "${targets[@]}"; do
  mkdir -p "$build/corpus/$t"
  cp "tests/fuzz/seeds/${t%_fuzz}/"* "$build/corpus/$t/"
done

export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
fuzz_one() {  # target: runs it for $seconds; its exit status goes to fuzz-<target>.status
  local rc=0
  (cd "$build" && "./tests/fuzz/$1" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 "corpus/$1" > "fuzz-$1.log" 2>&1) || rc=$?
  echo "$rc" > "$build/fuzz-$1.status"
}
# One target per core at a time: each is a single process.
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do wait -n || true; done
  echo "fuzz: $t for $seconds s"
  fuzz_one "$t" &
done
wait
for t in "${targets[@]}"; do
  if [ "$(cat "$build/fuzz-$t.status")" != 0 ]; then
    tail -40 "$build/fuzz-$t.log"
    echo "fuzz: $t failed (the input is saved in $build/)"
    exit 1
  fi
  echo "fuzz: $t"
  grep -E "^stat::(number_of_executed_units|peak_rss_mb)" "$build/fuzz-$t.log" | sed 's/^/  /'
done
echo "fuzz: all targets clean"
