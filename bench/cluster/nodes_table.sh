#!/usr/bin/env bash
# Nodes x ranks on the one-machine test bed (tools/cluster): Loom, OpenMPI and every Gloo
# all-reduce algorithm, f32 sum all-reduce at one size, on N nodes x K ranks a node, links shaped
# to each RATE, each library timed by bench/compare/per_op.hpp's method (every rank times every
# call, a call is its slowest rank's, the median over calls), each repetition a fresh launch of
# every library in turn. Around the launches of each bed it measures the links' bounds: one
# iperf3 stream between two nodes, and N streams at once, node i to node i+1 (what every node
# sends at once in a ring between nodes, on this machine's shared cores); and what the cores
# take for a flat ring's transfers alone, N x K ranks over loopback TCP at once, nothing reduced
# (bench/compare/loopback_footprint): where that takes longer than the link would, the cores, which
# every node shares here, are the bound. Needs root.
#
#   bench/cluster/nodes_table.sh [--build DIR] [--nodes "2 4"] [--rates "1gbit 10gbit"]
#       [--ranks-per-node 2] [--size 64M] [--reps 3] [--iters 5] [--warmup 8]
#       [--libs "loom mpi gloo"] [--loom-algos "ring hierarchical"] [--out DIR]
# --warmup: untimed calls before the timed ones, the same for every library. Loom measures its
# two cheapest all-reduces across hosts on a size's first calls (docs/tuning.md, "Measured on the
# first calls"): at 8 MiB and up with the default slots that is 8 calls, so the default of 8
# times the one it keeps (below 8 MiB the trial is longer: 22 calls at 1 MiB).
# --loom-algos: Loom again with each of these all-reduce algorithms forced (LOOM_ALGO), as
# columns loom:ALGO beside the model's own choice.
# Writes DIR/runs.csv (every launch), DIR/links.csv (every iperf3 measure), DIR/cores.csv (every
# loopback_footprint measure), DIR/logs/ and the table DIR/table.md (bench/cluster/nodes_report.py).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

build=$root/build nodes="2 4" rates="1gbit 10gbit" per_node=2 size=64M reps=3 iters=5 warmup=8
libs="loom mpi gloo" loom_algos="" out=nodes-table
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --ranks-per-node) per_node=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --libs) libs=$2; shift 2 ;;
    --loom-algos) loom_algos=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) sed -n '2,/^set -e/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
done
build=$(cd "$build" && pwd)
loomrun=$build/tools/loomrun perf=$build/bench/loom-perf
gloo=$build/bench/compare/gloo_bench mpi=$build/bench/compare/mpi_bench
footprint=$build/bench/compare/loopback_footprint
# Every Gloo all-reduce algorithm, as the comparison's harness lists them.
gloo_algos=$(cd "$root/bench/compare" &&
  python3 -B -c 'from harness.drivers import GLOO_ALGOS; print(" ".join(GLOO_ALGOS))')
[ -x "$loomrun" ] && [ -x "$perf" ] || { echo "nodes_table: build loomrun and loom-perf in $build first" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "nodes_table: needs root (network namespaces)" >&2; exit 1; }
case "$size" in
  *K) bytes=$(( ${size%K} << 10 )) ;; *M) bytes=$(( ${size%M} << 20 )) ;;
  *G) bytes=$(( ${size%G} << 30 )) ;; *) bytes=$size ;;
esac
mkdir -p "$out/logs"
out=$(cd "$out" && pwd)

export LOOM_CLUSTER=${LOOM_CLUSTER:-ntab}
cluster=$root/tools/cluster/cluster.sh
export LOOM_SECRET=${LOOM_SECRET:-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
trap '"$cluster" down >/dev/null 2>&1 || true' EXIT
"$cluster" down >/dev/null 2>&1 || true

runs=$out/runs.csv links=$out/links.csv cores=$out/cores.csv
[ -e "$runs" ] || echo "rate,nodes,ranks_per_node,rep,impl,bytes,time_us,busbw_gbps,choice" > "$runs"
[ -e "$links" ] || echo "rate,nodes,when,streams,gbits_each" > "$links"
[ -e "$cores" ] || echo "rate,nodes,when,ranks,bytes,pass_us" > "$cores"

# iperf3 for 3 s from node $1 to node $2 (a server started there for one test): Gbit/s received.
stream() {
  local from=$1 to=$2 port=$3 log=$4
  "$cluster" exec "$to" iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
  local server=$!
  sleep 0.5
  "$cluster" exec "$from" iperf3 -c "$("$cluster" addr "$to")" -p "$port" -t 3 -J > "$log" 2>&1 || true
  wait "$server" 2>/dev/null || true
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.3f" % (d["end"]["sum_received"]["bits_per_second"]/1e9))' "$log" 2>/dev/null || echo nan
}

# The links' bounds on this bed: one stream (node 2 to node 1), then every node to the next at once.
links_of() {
  local rate=$1 n=$2 when=$3
  local one; one=$(stream 2 1 5201 "$out/logs/iperf-$rate-$n-$when-1.json")
  echo "$rate,$n,$when,1,$one" >> "$links"
  local pids=() i
  for i in $(seq 1 "$n"); do
    ( stream "$i" $(( i % n + 1 )) $(( 5300 + i )) "$out/logs/iperf-$rate-$n-$when-ring$i.json" \
        > "$out/logs/iperf-$rate-$n-$when-ring$i.txt" ) &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || true; done
  local each
  each=$(cat "$out/logs/iperf-$rate-$n-$when"-ring*.txt | paste -sd' ')
  echo "$rate,$n,$when,$n,$(echo "$each" | tr ' ' ';')" >> "$links"
  local ranks=$(( n * per_node )) pass="nan"
  if [ -x "$footprint" ]; then
    pass=$("$footprint" "$ranks" "$bytes" | grep '^loopback_footprint' | cut -d, -f5) || pass=nan
    echo "$rate,$n,$when,$ranks,$bytes,${pass:-nan}" >> "$cores"
  fi
  echo "nodes_table: $n nodes at $rate, $when: one stream $one Gbit/s; $n at once: $each;" \
    "$ranks ranks' ring transfers over loopback ${pass:-nan} us"
}

# One launch on every node (loomrun there), its output per node in $log.N; rank 0's row on node 1.
on_every_node() {
  local n=$1 log=$2; shift 2
  local master port pids=() i rc=0
  master=$("$cluster" addr 1)
  port=$(( 21000 + RANDOM % 20000 ))
  for i in $(seq 1 "$n"); do
    "$cluster" exec "$i" timeout 300 "$loomrun" --nproc-per-node "$per_node" --nnodes "$n" \
      --node-rank $((i - 1)) --master-addr "$master" --master-port "$port" \
      "${@//@HOST@/$("$cluster" addr "$i")}" > "$log.$i" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}

record() {  # rate n rep impl time_us busbw choice
  echo "$1,$2,$per_node,$3,$4,$bytes,$5,$6,\"$7\"" >> "$runs"
  echo "nodes_table: $2 nodes x $per_node at $1, rep $3, $4: $5 us ($7)"
}

launch_loom() {  # rate n rep [algorithm]
  local rate=$1 n=$2 rep=$3 algo=${4:-} impl=loom${4:+:$4} log=$out/logs/loom${4:+-$4}-$1-$2-$3
  if ! (export LOOM_DEBUG=INFO ${algo:+LOOM_ALGO=allreduce:$algo}
        on_every_node "$n" "$log" "$perf" -o allreduce -b "$bytes" -e "$bytes" -n "$iters" -w "$warmup" --csv); then
    record "$rate" "$n" "$rep" "$impl" nan nan "failed: see $log.1"; return
  fi
  local row choice
  row=$(grep -E '^\[0\] [0-9]' "$log.1" | tail -1 | sed 's/^\[0\] //')
  # The choice for the table's size (the largest call loom-perf logged), and where a trial ran,
  # what it kept and both medians: the comparison harness reads it, for both tables alike.
  choice=$(cd "$root/bench/compare" && python3 -B -c \
    'import sys; from harness.drivers import choice_of; print(choice_of("allreduce", open(sys.argv[1]).read()))' \
    "$log.1") || choice=""
  record "$rate" "$n" "$rep" "$impl" "$(cut -d, -f5 <<< "$row")" "$(cut -d, -f7 <<< "$row")" "$choice"
}

launch_gloo() {
  local rate=$1 n=$2 rep=$3 algo=$4 log=$out/logs/gloo-$4-$1-$2-$3 store
  store=$(mktemp -d /tmp/gloo-store-XXXXXX)
  if ! on_every_node "$n" "$log" "$gloo" --store "$store" --host @HOST@ --op allreduce \
      --algo "$algo" --bytes "$bytes" -n "$iters" -w "$warmup"; then
    rm -rf "$store"; record "$rate" "$n" "$rep" "gloo:$algo" nan nan "failed: see $log.1"; return
  fi
  rm -rf "$store"
  local row; row=$(grep -E '^\[0\] gloo:' "$log.1" | tail -1 | sed 's/^\[0\] //')
  record "$rate" "$n" "$rep" "gloo:$algo" "$(cut -d, -f5 <<< "$row")" "$(cut -d, -f6 <<< "$row")" ""
}

launch_mpi() {
  local rate=$1 n=$2 rep=$3 log=$out/logs/mpi-$1-$2-$3 hosts="" i
  for i in $(seq 1 "$n"); do hosts+="${hosts:+,}${LOOM_CLUSTER}node$i:$per_node"; done
  # vader between a node's ranks, tcp between nodes over the bed's links (eth0), as on a cluster.
  if ! "$cluster" exec 1 timeout 300 mpirun --allow-run-as-root --oversubscribe \
      -np $(( n * per_node )) --host "$hosts" --mca plm_rsh_agent "$root/tools/cluster/rsh-agent.sh" \
      -x LOOM_CLUSTER --mca pml ob1 --mca btl self,vader,tcp --mca btl_tcp_if_include eth0 \
      --mca oob_tcp_if_include eth0 "$mpi" allreduce "$bytes" "$iters" "$warmup" > "$log" 2>&1; then
    record "$rate" "$n" "$rep" mpi nan nan "failed: see $log"; return
  fi
  local row; row=$(grep -E '^mpi' "$log" | tail -1)
  record "$rate" "$n" "$rep" mpi "$(cut -d, -f5 <<< "$row")" "$(cut -d, -f6 <<< "$row")" ""
}

for rate in $rates; do
  for n in $nodes; do
    "$cluster" up "$n" --rate "$rate" >/dev/null
    links_of "$rate" "$n" before
    for rep in $(seq 1 "$reps"); do
      for lib in $libs; do
        case "$lib" in
          loom) launch_loom "$rate" "$n" "$rep"
                for a in $loom_algos; do launch_loom "$rate" "$n" "$rep" "$a"; done ;;
          mpi) launch_mpi "$rate" "$n" "$rep" ;;
          gloo) for a in $gloo_algos; do
                  launch_gloo "$rate" "$n" "$rep" "$a"
                done ;;
          *) echo "nodes_table: unknown library $lib" >&2; exit 2 ;;
        esac
      done
    done
    links_of "$rate" "$n" after
    "$cluster" down >/dev/null
  done
done
python3 "$here/nodes_report.py" "$out" > "$out/table.md"
cat "$out/table.md"
