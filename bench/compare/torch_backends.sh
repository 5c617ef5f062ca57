#!/usr/bin/env bash
# torch.distributed with backend loom against backend gloo, same run, ROUNDS rounds, 2 ranks, one
# compute thread per rank, both on OpenBLAS. Each round prints its ratios (loom / gloo):
#   DDP samples/s (MLP 784-1024-1024-1024-10, batch 64 per rank), exposed communication
#   (DDP step - one process's step), dist.all_reduce 8 B latency and 64 MiB busbw from Python;
# and the per-call cost of the binding (torch_call_overhead.py).
#   bench/compare/torch_backends.sh [BUILD_DIR] [ROUNDS] [STEPS]
set -euo pipefail
build=$(cd "${1:-build}" && pwd) rounds=${2:-3} steps=${3:-200}
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-/usr/bin/python3}
export PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH} OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
"$python" -c "import loom_torch" || { echo "loom_torch is not built in $build"; exit 1; }

# Each run is bounded: torch 1.13's gloo was seen spinning at 100% CPU in one rank after the
# other had finished (a round that does not finish is reported and skipped, not waited for).
limit=${TORCH_RUN_LIMIT:-600}
ddp() {
  timeout "$limit" "$python" "$here/torch_ddp.py" --batch-size 64 --steps "$steps" "$@" |
    awk -F, '{print $3, $4}'
}
allreduce() {  # backend -> "latency_us_8B busbw_GBs_64MiB"
  timeout "$limit" "$python" "$here/torch_allreduce.py" --backend "$1" --ranks 2 --sizes 8,67108864 |
    awk -F, '$3 == 8 {l = $4} $3 == 67108864 {b = $5} END {print l, b}'
}

unfinished() { echo "round $round: $1 did not finish within $limit s: round skipped"; }
for round in $(seq 1 "$rounds"); do
  read -r loom_rate loom_ms < <(ddp --backend loom) || { unfinished "DDP with loom"; continue; }
  read -r gloo_rate gloo_ms < <(ddp --backend gloo) || { unfinished "DDP with gloo"; continue; }
  read -r alone_rate alone_ms < <(ddp --no-ddp) || { unfinished "the lone process"; continue; }
  read -r loom_lat loom_bw < <(allreduce loom) || { unfinished "all_reduce with loom"; continue; }
  read -r gloo_lat gloo_bw < <(allreduce gloo) || { unfinished "all_reduce with gloo"; continue; }
  awk -v r="$round" -v lr="$loom_rate" -v lm="$loom_ms" -v gr="$gloo_rate" -v gm="$gloo_ms" \
      -v am="$alone_ms" -v ll="$loom_lat" -v lb="$loom_bw" -v gl="$gloo_lat" -v gb="$gloo_bw" 'BEGIN {
    le = lm - am; ge = gm - am
    printf "round %s: DDP samples/s loom %.0f gloo %.0f (%.2fx); exposed comm ms loom %.2f gloo %.2f (%.2fx); ", r, lr, gr, lr / gr, le, ge, (ge > 0 ? le / ge : 0)
    printf "all_reduce 8 B us loom %.1f gloo %.1f (%.3fx); 64 MiB busbw GB/s loom %.2f gloo %.2f (%.2fx)\n", ll, gl, ll / gl, lb, gb, lb / gb }'
done
echo "per-call cost (us), one process:"
"$python" "$here/torch_call_overhead.py"
