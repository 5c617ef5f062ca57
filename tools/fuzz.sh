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
targets=(store_request_fuzz store_reply_fuzz file_store_log_fuzz handshake_fuzz frame_fuzz)
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"

seed() {  # target name bytes...: a starting input (printf escapes)
  mkdir -p "$build/corpus/$1"
  printf "$3" > "$build/corpus/$1/$2"
}
# A set of "k" = "v", a get with a timeout, a 3-key wait; replies (empty, a value, an integer,
# two flags, a timeout, an error); a FileStore log (a set then a remove; a torn last record); a
# challenge; a TCP frame and an empty shm page.
seed store_request_fuzz set '\x01\x01\x00\x00\x00k\x01\x00\x00\x00v'
seed store_request_fuzz get '\x02\x01\x00\x00\x00k\xe8\x03\x00\x00'
seed store_request_fuzz wait '\x06\x03\x00\x00\x00\x01\x00\x00\x00a\x01\x00\x00\x00b\x01\x00\x00\x00c\x10\x00\x00\x00'
seed store_reply_fuzz ok '\x00'
seed store_reply_fuzz value '\x00\x01\x00\x00\x00v'
seed store_reply_fuzz integer '\x00\x05\x00\x00\x00\x00\x00\x00\x00'
seed store_reply_fuzz flags '\x00\x01\x00'
seed store_reply_fuzz timeout '\x01'
seed store_reply_fuzz error '\x02\x04\x00\x00\x00oops'
seed file_store_log_fuzz log '\x01\x01\x00\x00\x00k\x01\x00\x00\x00v\x02\x01\x00\x00\x00k\x00\x00\x00\x00'
seed file_store_log_fuzz torn '\x01\x01\x00\x00\x00k\x01\x00\x00\x00v\x01\x01\x00\x00\x00k\x05\x00\x00\x00ab'
seed handshake_fuzz challenge 'LOOMAUT1\x01abcdefghijklmnopqrstuvwxyz012345'
seed frame_fuzz tcp '\x01\x04\x00\x00\x00\x49\x4f\x4f\x4c\x07\x00\x00\x00\x00\x00\x00\x10\x01\x00\x00\x00\x00\x00\x00\x00abcd\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00'
seed frame_fuzz shm '\x00\x01\x00\x00\x00\x00\x00\x00\x00'

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
