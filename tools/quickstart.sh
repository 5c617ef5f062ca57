#!/usr/bin/env bash
# Installs what Loom needs, builds it, and runs the main job: an all-reduce bandwidth sweep on
# 4 local ranks with results checked.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target loomrun loom-perf
echo
echo "== loomrun --nproc-per-node 4 loom-perf -o allreduce -b 8 -e 64M -f 4 --check"
LOOM_DEBUG=${LOOM_DEBUG:-INFO} build/tools/loomrun --nproc-per-node 4 build/bench/loom-perf -o allreduce -b 8 -e 64M -f 4 --check
cat <<'NEXT'

Next:
  build/tools/loomrun --nproc-per-node 2 build/bench/loom-perf -o allgather -d bf16 --check
                                      other ops: reducescatter broadcast reduce; -d f16 i8 u64 ...
  LOOM_DEBUG=INFO ...                 see transports, rings and settings chosen at start
  LOOM_NSOCKS=4 LOOM_BUFFSIZE=8M ...  tune the TCP transport
  cmake --build build --target loom-train && build/tools/loomrun --nproc-per-node 2 build/tools/loom-train
                                      train an MLP data-parallel (DDP), with a step time report
  tools/test.sh                       the whole test suite
  docs/api.md, docs/launching.md      the API and its settings; running across machines
NEXT
