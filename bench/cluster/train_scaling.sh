#!/usr/bin/env bash
# Data-parallel training across node counts on the one-machine test bed (tools/cluster), as the
# guides' 1-node vs 2-node table: for each node count, that many nodes with links shaped to
# RATE, loomrun on each (nodes meet at node 1's rendezvous, no node ranks) running loom-train
# with the same per-rank batch; rank 0's summary gives samples/s and the step's exposed
# communication; scaling efficiency is samples/s over (ranks x one node's samples/s per rank),
# the first node count being the baseline. Writes
# DIR/scaling.csv, DIR/scaling.md (the table) and DIR/scaling.svg. Needs root.
#
#   bench/cluster/train_scaling.sh [--build DIR] [--rate 1gbit] [--nodes "1 2 4"]
#       [--ranks-per-node K] [--layers 784,1024,1024,10] [--batch-size 256] [--steps 30]
#       [--out DIR]
# The nodes share the machine's cores: with more ranks than cores, compute slows too, which the
# efficiency column includes and the exposed-communication column does not.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

build=$root/build rate=1gbit nodes="1 2 4" per_node=1 layers=784,1024,1024,10 batch=256 steps=30
out=scaling-out
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --ranks-per-node) per_node=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --batch-size) batch=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
done
build=$(cd "$build" && pwd)
loomrun=$build/tools/loomrun train=$build/tools/loom-train
[ -x "$loomrun" ] && [ -x "$train" ] || { echo "train_scaling: build loomrun and loom-train in $build first" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "train_scaling: needs root (network namespaces)" >&2; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)

export LOOM_CLUSTER=${LOOM_CLUSTER:-scale}
cluster=$root/tools/cluster/cluster.sh
export LOOM_SECRET=${LOOM_SECRET:-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')}
trap '"$cluster" down >/dev/null 2>&1 || true' EXIT
"$cluster" down >/dev/null 2>&1 || true

csv=$out/scaling.csv
echo "nodes,ranks,rate,samples_per_s,speedup,efficiency_pct,step_ms,exposed_comm_ms,compute_ms" > "$csv"
base=""
for n in $nodes; do
  "$cluster" up "$n" --rate "$rate" >/dev/null
  pids=()
  for i in $(seq 1 "$n"); do
    "$cluster" exec "$i" "$loomrun" --nnodes "$n" --nproc-per-node "$per_node" \
      --rdzv-endpoint "$("$cluster" addr 1)" --rdzv-id "scaling$n" --rdzv-conf last_call_timeout=1 \
      "$train" --layers "$layers" --batch-size "$batch" --steps "$steps" --samples 65536 \
      --warmup-steps 3 --calibrate-steps 0 > "$out/node$i.log" 2>&1 &
    pids+=($!)
  done
  rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  [ $rc = 0 ] || { echo "train_scaling: $n node(s) failed; node 1's output:" >&2; cat "$out/node1.log" >&2; exit 1; }
  log=$out/node1.log
  rate_now=$(grep -m1 "summary:" "$log" | sed -E 's/.*summary: ([0-9.]+) samples.*/\1/')
  step=$(grep -m1 "step time" "$log" | sed -E 's/.*total ([0-9.]+).*/\1/')
  exposed=$(grep -m1 "step time" "$log" | sed -E 's/.*exposed communication ([0-9.]+).*/\1/')
  [ -n "$rate_now" ] && [ -n "$step" ] || { echo "train_scaling: no summary from $n node(s)" >&2; cat "$log" >&2; exit 1; }
  ranks=$((n * per_node))
  [ -n "$base" ] || { base=$rate_now; base_ranks=$ranks; }
  awk -v n="$n" -v r="$ranks" -v rate="$rate" -v s="$rate_now" -v b="$base" -v br="$base_ranks" \
    -v step="$step" -v ex="$exposed" 'BEGIN {
      printf "%d,%d,%s,%.0f,%.2f,%.1f,%.2f,%.2f,%.2f\n", n, r, rate, s, s / b, 100 * s * br / (r * b),
        step, ex, step - ex }' >> "$csv"
  echo "train_scaling: $n node(s): $(tail -1 "$csv")"
  "$cluster" down >/dev/null
done
{
  echo "| nodes | ranks | samples/s | speedup | scaling efficiency | step (ms) | exposed communication (ms) | compute and rest (ms) |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
  tail -n +2 "$csv" | awk -F, '{ printf "| %d | %d | %d | %.2fx | %.1f%% | %.1f | %.1f | %.1f |\n", $1, $2, $4, $5, $6, $7, $8, $9 }'
} > "$out/scaling.md"
python3 "$here/plot_scaling.py" "$csv" "$out/scaling.svg"
cat "$out/scaling.md"
echo "train_scaling: wrote $csv, $out/scaling.md and $out/scaling.svg"
