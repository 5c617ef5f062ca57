#!/usr/bin/env bash
# Two or more of Loom's algorithms for one operation against each other on one host, the way the
# model's rules in docs/tuning.md were measured: every algorithm forced in turn (LOOM_ALGO), each
# launch fresh, launches alternating within every repetition, in each buffer mode (out of place;
# in place; in place with every cache line of the input rewritten before each call, as a training
# step writes its gradients), each repetition starting one algorithm further along the list.
# loom-perf times every call on every rank, a call counts as its slowest rank's, a launch's figure
# is the median call. The algorithm `model` forces none: the library chooses (the cost model, or
# a trial on the first calls where it measures the choice).
#   bench/algo_ab.sh [--build DIR] [--ranks 2] [--op allreduce] [--algos "ring single_copy"]
#                    [--sizes "1M 4M"] [--reps 5] [--iters 30] [--warmup 3]
#                    [--modes "oop inplace fresh"]
# Prints one line per mode, size (as given) and algorithm: the busbw (GB/s) of every repetition
# (nan: the launch failed), then their median; and per mode and size each algorithm's median over
# the first's.
set -euo pipefail

build=build ranks=2 op=allreduce algos="ring single_copy" sizes="1M 4M" reps=5 iters=30 warmup=3
modes="oop inplace fresh"
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --op) op=$2; shift 2 ;;
    --algos) algos=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "algo_ab.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

loomrun=$build/tools/loomrun perf=$build/bench/loom-perf
for tool in "$loomrun" "$perf"; do
  [ -x "$tool" ] || { echo "algo_ab.sh: $tool is not built" >&2; exit 2; }
done

mode_flags() {
  case $1 in
    oop) echo "" ;;
    inplace) echo "--inplace" ;;
    fresh) echo "--inplace --fresh-inputs" ;;
    *) echo "algo_ab.sh: unknown mode $1 (oop, inplace, fresh)" >&2; exit 2 ;;
  esac
}

rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
read -r -a algo_list <<< "$algos"
[ "${#algo_list[@]}" -gt 0 ] || { echo "algo_ab.sh: --algos names no algorithm" >&2; exit 2; }
for rep in $(seq "$reps"); do
  # Each repetition starts one algorithm further along the list, so that whatever a launch's
  # place in the turn costs (what ran just before it, the host's drift over a turn) falls on
  # every algorithm alike.
  turn=()
  for k in "${!algo_list[@]}"; do
    turn+=("${algo_list[$(( (k + rep - 1) % ${#algo_list[@]} ))]}")
  done
  for mode in $modes; do
    for size in $sizes; do
      for algo in "${turn[@]}"; do
        rule=("LOOM_ALGO=${op}:${algo}")
        [ "$algo" = model ] && rule=(-u LOOM_ALGO)
        # shellcheck disable=SC2046
        env "${rule[@]}" LOOM_TRANSPORT=shm timeout 300 "$loomrun" --nproc-per-node "$ranks" \
          "$perf" -o "$op" -b "$size" -e "$size" -n "$iters" -w "$warmup" --csv $(mode_flags "$mode") 2>/dev/null |
          grep -E '^\[0\] [0-9]' | sed 's/^\[0\] //' |
          awk -F, -v m="$mode" -v s="$size" -v a="$algo" -v r="$rep" '{print m, s, a, r, $7}' >> "$rows" ||
          echo "$mode $size $algo $rep nan" >> "$rows"
      done
    done
  done
done

python3 - "$rows" "$algos" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
algos = sys.argv[2].split()
runs = {}
for mode, size, algo, rep, busbw in rows:
    runs.setdefault((mode, size), {}).setdefault(algo, []).append(float(busbw))
for (mode, size), by_algo in runs.items():
    medians = {}
    for algo in algos:
        values = [v for v in by_algo.get(algo, []) if v == v]
        medians[algo] = statistics.median(values) if values else float("nan")
        print(f"{mode:8} {size:>10} {algo:20} " + " ".join(f"{v:.3f}" for v in by_algo.get(algo, []))
              + f"   median {medians[algo]:.3f}")
    first = medians[algos[0]]
    print(f"{mode:8} {size:>10} " + ", ".join(
        f"{a} / {algos[0]} = {medians[a] / first:.2f}" for a in algos[1:]))
EOF
