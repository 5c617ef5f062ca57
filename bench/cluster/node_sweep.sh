#!/usr/bin/env bash
# All-reduce bandwidth across node counts on the one-machine test bed (tools/cluster): for each
# node count, bring up that many nodes with links shaped to RATE, run loom-perf with K ranks per
# node (loomrun on every node), and collect rank 0's rows; then one CSV and an SVG plot of busbw
# against message size, a line per node count, the link rate drawn for reference. Needs root.
#
#   bench/cluster/node_sweep.sh [--build DIR] [--rate 1gbit] [--ranks-per-node K]
#       [--nodes "1 2 4 8"] [--min 1M] [--max 64M] [--factor 4] [--iters 5]
#       [--algo "NAME..."] [--dtype f32] [--out DIR]
# --algo: LOOM_ALGO values to compare (e.g. "ring hierarchical"); default: the cost model's pick.
# Writes DIR/sweep.csv and DIR/sweep.svg (DIR defaults to sweep-out/).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

build=$root/build rate=1gbit per_node=1 nodes="1 2 4 8" min=1M max=64M factor=4 iters=5
algo="" dtype=f32 out=sweep-out
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --ranks-per-node) per_node=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --min) min=$2; shift 2 ;;
    --max) max=$2; shift 2 ;;
    --factor) factor=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --algo) algo=$2; shift 2 ;;
    --dtype) dtype=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
done
build=$(cd "$build" && pwd)
loomrun=$build/tools/loomrun perf=$build/bench/loom-perf
[ -x "$loomrun" ] && [ -x "$perf" ] || { echo "node_sweep: build loomrun and loom-perf in $build first" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "node_sweep: needs root (network namespaces)" >&2; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)

export LOOM_CLUSTER=${LOOM_CLUSTER:-sweep}
cluster=$root/tools/cluster/cluster.sh
export LOOM_SECRET=${LOOM_SECRET:-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')}
trap '"$cluster" down >/dev/null 2>&1 || true' EXIT
"$cluster" down >/dev/null 2>&1 || true

csv=$out/sweep.csv
echo "nodes,ranks_per_node,ranks,algorithm,rate,size,count,type,redop,time_us,algbw_gbps,busbw_gbps" > "$csv"
for n in $nodes; do
  "$cluster" up "$n" --rate "$rate" >/dev/null
  master=$("$cluster" addr 1)
  for a in ${algo:-auto}; do
    port=$(( 21000 + RANDOM % 20000 ))
    pids=()
    for i in $(seq 1 "$n"); do
      env $([ "$a" = auto ] || echo "LOOM_ALGO=$a") "$cluster" exec "$i" "$loomrun" \
        --nproc-per-node "$per_node" --nnodes "$n" --node-rank $((i - 1)) \
        --master-addr "$master" --master-port "$port" \
        "$perf" -b "$min" -e "$max" -f "$factor" -n "$iters" -w 1 -d "$dtype" --csv \
        > "$out/node$i.log" 2>&1 &
      pids+=($!)
    done
    rc=0
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    if [ $rc != 0 ]; then
      echo "node_sweep: $n node(s), $a failed; node 1's output:" >&2
      cat "$out/node1.log" >&2
      exit 1
    fi
    # Rank 0's rows: "[0] size,count,type,redop,time_us,algbw,busbw,wrong".
    grep -E '^\[0\] [0-9]' "$out/node1.log" | sed 's/^\[0\] //' | cut -d, -f1-7 |
      sed "s/^/$n,$per_node,$((n * per_node)),$a,$rate,/" >> "$csv"
    echo "node_sweep: $n node(s) x $per_node rank(s), $a: $(grep -cE '^\[0\] [0-9]' "$out/node1.log") sizes"
  done
  "$cluster" down >/dev/null
done
python3 "$here/plot_sweep.py" "$csv" "$out/sweep.svg"
column -s, -t < "$csv"
echo "node_sweep: wrote $csv and $out/sweep.svg"
