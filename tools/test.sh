#!/usr/bin/env bash
# The test command: dependencies, the size rule (tools/check_sizes.py), configure, build, then every
# CTest label except `slow`.
#   tools/test.sh                          release build in build/
#   tools/test.sh --sanitize address,undefined   ASan+UBSan build in build-asan/ (with the fuzz
#                                          targets' short runs); where the CUDA
#                                          runtime's headers are, it also runs the gpu label on
#                                          the emulated runtime (as --cuda-emulated, under ASan)
#   tools/test.sh --sanitize thread        TSan build in build-tsan/ (unit and threaded tests)
#   tools/test.sh --slow                   also the exhaustive sweeps
#   tools/test.sh --cuda-emulated          the GPU paths on the emulated CUDA runtime
#                                          (tests/cuda_emulation) in build-cudaemu/: the gpu label
# Where /usr/bin/python3 has PyTorch (tools/deps.sh --torch), the release build includes
# loom_torch and the `torch` label runs; where the venv of PyTorch 2.x that tools/deps.sh --torch
# makes is there too (LOOM_TORCH_VENV), loom_torch is built and tested for both. Extra arguments
# after -- go to ctest (e.g. -- -R Store).
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize="" labels_exclude="slow" ctest_extra=() cuda_emulated=0 gpu_label_too=0
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize) sanitize=$2; shift 2 ;;
    --slow) labels_exclude="^$"; shift ;;
    --cuda-emulated) cuda_emulated=1; shift ;;
    --) shift; ctest_extra=("$@"); break ;;
    *) echo "usage: tools/test.sh [--sanitize LIST] [--slow] [--cuda-emulated] [-- ctest args]"; exit 2 ;;
  esac
done

# Where PyTorch is already there the build includes loom_torch and its tests, which need more
# than PyTorch itself (expecttest, from PyPI): install those too.
if /usr/bin/python3 -c "import torch" 2>/dev/null; then tools/deps.sh --torch; else tools/deps.sh; fi

# The size rule and the state rule need no build: no source file over 600 lines, no function
# over 120; no field that changes named in more than two files of its class. A breach fails the
# run, after the build and the tests have run too.
sizes=0
python3 tools/check_sizes.py || sizes=$?
python3 tools/check_fields.py || sizes=$?

build=build type=Release ctest_filter=() targets=() cuda=AUTO
if [ "$cuda_emulated" = 1 ]; then
  # Needs the CUDA runtime's headers only (a toolkit in /usr/local/cuda or CUDA_HOME).
  build=build-cudaemu type=RelWithDebInfo cuda=EMULATED
  ctest_filter=(-L gpu)
  targets=(--target gpu_tests loom-perf loomrun)
fi
case "$sanitize" in
  "") ;;
  thread)
    build=build-tsan type=RelWithDebInfo
    # TSan checks the threaded parts: Work and the worker thread, abort from another thread, the
    # health monitor, the store server and clients, DDP's overlapped buckets; split, shrink and
    # their children; point-to-point batches; the shared windows and single-copy all-to-all; the
    # shared-memory transport; kills, the teardown drill; the collective matrix with the model's
    # choice at every world size (but the mega-element counts: 3 minutes under TSan, the same
    # threads as the others). What it leaves out, and why, is in docs/testing.md.
    ctest_filter=(-L "unit|multiproc|fault" -R "^(CallQueueTest|FailureProtocol[A-Za-z]*|StoreServer|StoreAuth|Stores|Async|Config|Init|Fault|Lifecycle|BadInput|Monitors|Auth|Ddp|FrozenRank|FileStoreFile|TcpConnect|SecretFile|HandshakeAdmission|ShrinkMembership|Split[A-Za-z]*|CreateGroup|SetTimeout|ChildCommunicator|KilledRank|Cases|Kinds|Drill|DataPort|AwaitKey|Waiter|Transports|PointToPoint|SharedMemory|SharedWindows|Windows|HostWindows|SingleCopyAllToAll|OneCopy|TcpCallerMemory|SpinBudget|BatchWake|WorldSizes/Split|WorldSizes/Collectives\.Every[A-Za-z]+/[a-z]+_world[0-9]+_auto|WorldSizes/MoreCollectives\.[A-Za-z]+/[a-z]+_world[0-9]+_auto)[ ./]")
    targets=(--target unit_tests transport_unit_tests multiproc_tests fault_tests ddp_multiproc_tests
             init_tests)
    cuda=OFF  # none of these tests runs a GPU path, so there are no kernels to compile
    export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
    ;;
  *)
    build=build-asan type=RelWithDebInfo
    # The consumer is built without sanitizers; the comparison harness measures speed, and the
    # other libraries' drivers are not built here. The three tests that train to convergence run
    # in the release build only: each runs the same library calls for tens of epochs (their check
    # is the loss), two of them alone on both cores, and under ASan they took 340 s of CI's time;
    # shrink, kills and restarts run under ASan in the C++ tests and the other loom-train and
    # loomrun tests.
    ctest_filter=(-L "unit|multiproc|fault|fuzz"
                  -E "^(install|compare)\.|^loom-train\.(ShrinkGoesOn|DefaultsConverge)|^loomrun\.RestartsConverge")
    # What those labels run: the test executables and the tools their scripts start.
    targets=(--target unit_tests transport_unit_tests init_tests ddp_unit_tests multiproc_tests
             ddp_multiproc_tests fault_tests store_probe loom loomrun loom-perf loom-tune loom-train)
    # The fuzz targets' short runs, under the sanitizers too.
    for seeds in tests/fuzz/seeds/*/; do targets+=("$(basename "$seeds")_replay"); done
    # The GPU paths on the emulated runtime in the same build: they are checked under ASan, and
    # CI compiles the library once less than with a separate --cuda-emulated build.
    if [ -f "${CUDA_HOME:-/usr/local/cuda}/include/cuda_runtime_api.h" ]; then
      cuda=EMULATED gpu_label_too=1
      targets+=(gpu_tests)
    fi
    export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
    ;;
esac

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# Sanitizer builds at -O1 with line tables: the sanitizers' own advice, and under half the compile
# time of -O2 -g (the ASan build was most of CI's time).
optimise=()
[ -n "$sanitize" ] && optimise=("-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")
# Sanitizer builds leave out the comparisons and microbenchmarks: nothing runs them there.
bench=ON
[ -n "$sanitize" ] && bench=OFF
[ "$cuda_emulated" = 1 ] && bench=OFF
# loom_torch (release build only): for Debian's PyTorch and for PyPI's 2.x in the venv. Say so
# plainly where either is left out.
torch_pythons=""
if [ -z "$sanitize" ] && [ "$cuda_emulated" = 0 ]; then
  torch_venv=${LOOM_TORCH_VENV:-$HOME/.cache/loom/torch2-venv}
  if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
    echo "test: the torch tests are left out: /usr/bin/python3 has no PyTorch (tools/deps.sh --torch installs Debian's 1.13 and PyPI's 2.x)"
  elif "$torch_venv/bin/python" -c "import torch" 2>/dev/null; then
    torch_pythons="$torch_venv/bin/python"
  else
    echo "test: the torch tests of PyTorch 2.x are left out: no venv at $torch_venv (tools/deps.sh --torch makes it)"
  fi
fi
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=$type -DLOOM_WERROR=ON -DLOOM_SANITIZE="$sanitize" \
  -DLOOM_BUILD_BENCH=$bench -DLOOM_CUDA=$cuda -DLOOM_TORCH_EXTRA_PYTHONS="$torch_pythons" \
  "${optimise[@]}" >/dev/null
cmake --build "$build" -j "$(nproc)" "${targets[@]}"
status=0
# A tuning table that loom-tune left under this user's cache would steer the algorithm choices
# the tests check: they read none unless they name one.
export LOOM_TUNE_FILE=off
# Runs ctest (first argument: what no test selected is, error or ignore); where a test failed,
# repeats the end of its output after the summary (it scrolls far above it otherwise).
run_ctest() {
  local rc=0 no_tests=$1
  shift
  ctest --test-dir "$build" --output-on-failure --no-tests="$no_tests" -j 2 -LE "$labels_exclude" "$@" || rc=$?
  if [ "$rc" != 0 ] && [ -f "$build/Testing/Temporary/LastTest.log" ]; then
    awk '/^[0-9]+\/[0-9]+ Testing: / { name = $3; n = 0; inside = 0; next }
         /^Output:$/ { inside = 1; getline; next }
         /^<end of output>$/ { inside = 0; next }
         inside { lines[n++] = $0 }
         /^Test Failed\./ {
           print "==== the end of the output of failed test " name " ===="
           for (i = (n > 40 ? n - 40 : 0); i < n; i++) print lines[i]
         }' "$build/Testing/Temporary/LastTest.log"
  fi
  return "$rc"
}
if [ "$gpu_label_too" = 1 ]; then
  # The host tests see no emulated GPU, as on a machine without one; then the gpu label sees one.
  # A filter after -- may select the tests of one pass only.
  no_tests=error
  [ "${#ctest_extra[@]}" -gt 0 ] && no_tests=ignore
  LOOM_EMULATED_GPUS=0 run_ctest "$no_tests" "${ctest_filter[@]}" "${ctest_extra[@]}" || status=$?
  run_ctest "$no_tests" -L gpu "${ctest_extra[@]}" || status=$?
else
  run_ctest error "${ctest_filter[@]}" "${ctest_extra[@]}" || status=$?
fi
[ "$sizes" = 0 ] || {
  echo "tools/check_sizes.py or tools/check_fields.py failed (above, before the build)"
  status=1
}
exit "$status"
