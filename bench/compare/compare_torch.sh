#!/usr/bin/env bash
# loom-train against PyTorch 1.13 DDP (gloo), 2 ranks, same MLP, batch 64 per rank, SGD with
# momentum, one BLAS thread per rank (both on OpenBLAS: tools/deps.sh --torch installs it, so
# Debian's torch does not fall back to the reference BLAS). Each round measures both frameworks
# with DDP and alone (no communication), and prints the ratios of that round:
#   samples/s           loom / torch (2 ranks)
#   exposed comm        (DDP step - single-process step), loom / torch
#   scaling efficiency  samples/s(2 ranks) / (2 x samples/s(one process)), loom and torch
#   bench/compare/compare_torch.sh [BUILD_DIR] [ROUNDS] [STEPS]
set -euo pipefail
build=${1:-build} rounds=${2:-3} steps=${3:-200}
here=$(cd "$(dirname "$0")" && pwd)
loomrun=$build/tools/loomrun train=$build/tools/loom-train
# Debian's PyTorch is in the system Python, whatever python3 comes first on PATH.
python=${PYTHON:-/usr/bin/python3}
"$python" -c "import torch" 2>/dev/null || { echo "PyTorch not installed (tools/deps.sh --torch)"; exit 1; }
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

loom_row() {  # model ranks(0 = --no-ddp) -> "samples/s step_ms"
  local args=(--layers "$1" --batch-size 64 --steps "$steps" --warmup-steps 2 --calibrate-steps 0 --epochs 1000)
  local out
  if [ "$2" = 0 ]; then out=$("$train" --no-ddp "${args[@]}"); else out=$("$loomrun" --nproc-per-node "$2" "$train" "${args[@]}"); fi
  echo "$out" | awk '/summary: /{for (i = 1; i <= NF; i++) if ($i == "summary:") r = $(i + 1)}
                     /total /{t = $NF} END {print r, t}'
}
torch_row() {  # model ranks(0 = --no-ddp) -> "samples/s step_ms", or "fail fail"
  local extra=(--ranks 2)
  [ "$2" = 0 ] && extra=(--no-ddp)
  # Gloo's rendezvous now and then hangs or a worker dies at start: bound each try, try thrice.
  local out="" attempt
  for attempt in 1 2 3; do
    out=$(timeout 180 "$python" "$here/torch_ddp.py" --layers "$1" --batch-size 64 --steps "$steps" \
      "${extra[@]}" 2>/dev/null) && break
    out=""
  done
  if [ -z "$out" ]; then echo "fail fail"; else echo "$out" | awk -F, '{print $3, $4}'; fi
}

for model in 784,1024,1024,1024,10 784,256,256,10; do
  echo "model $model, 2 ranks x batch 64, $steps steps"
  printf "  %-6s %-28s %-28s %-22s %s\n" round "loom: DDP / alone (samples/s)" "torch: DDP / alone (samples/s)" "exposed comm ms l / t" ratios
  for round in $(seq 1 "$rounds"); do
    read -r ld lds < <(loom_row "$model" 2)
    read -r la las < <(loom_row "$model" 0)
    read -r td tds < <(torch_row "$model" 2)
    read -r ta tas < <(torch_row "$model" 0)
    if [ "$td" = fail ] || [ "$ta" = fail ]; then
      echo "  $round      PyTorch did not finish this round (three tries); loom: $ld / $la samples/s"
      continue
    fi
    awk -v r="$round" -v ld="$ld" -v lds="$lds" -v la="$la" -v las="$las" -v td="$td" -v tds="$tds" \
        -v ta="$ta" -v tas="$tas" 'BEGIN {
      le = lds - las; te = tds - tas
      printf "  %-6s %9.0f / %-16.0f %9.0f / %-16.0f %6.2f / %-12.2f samples/s %.2fx  exposed %.2fx  efficiency loom %.0f%% torch %.0f%%\n",
        r, ld, la, td, ta, le, te, ld / td, (te > 0 ? le / te : 0), 100 * ld / (2 * la), 100 * td / (2 * ta) }'
  done
done
