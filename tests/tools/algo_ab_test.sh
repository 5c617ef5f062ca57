#!/usr/bin/env bash
# bench/algo_ab.sh end to end: two algorithms forced in turn at one size, in every buffer mode, one
# repetition: a figure for each mode and algorithm, and each mode's ratio; the model's own choice
# as an algorithm. A launch that fails (an
# algorithm the table lacks) is a nan figure, never a missing line.
set -euo pipefail
build=$1
here=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "FAIL: $*"; echo "$out"; exit 1; }

out=$(bash "$here/bench/algo_ab.sh" --build "$build" --sizes 64K --reps 1 --iters 5 \
  --algos "ring single_copy")
for mode in oop inplace fresh; do
  for algo in ring single_copy; do
    grep -qE "^$mode +64K $algo +[0-9]+\.[0-9]{3} +median [0-9]+\.[0-9]{3}$" <<< "$out" ||
      fail "no figure for $algo $mode"
  done
  grep -qE "^$mode +64K single_copy / ring = [0-9]+\.[0-9]{2}$" <<< "$out" || fail "no ratio for $mode"
done
out=$(bash "$here/bench/algo_ab.sh" --build "$build" --sizes 64K --reps 1 --iters 5 --modes oop \
  --algos "ring no_such_algorithm")
grep -qE "^oop +64K no_such_algorithm +nan +median nan$" <<< "$out" || fail "a failed launch is not nan"
# `model` forces nothing (the library chooses); two repetitions, each with both algorithms, the
# second starting at the other one.
out=$(bash "$here/bench/algo_ab.sh" --build "$build" --sizes 64K --reps 2 --iters 5 --warmup 1 \
  --modes oop --algos "model ring")
for algo in model ring; do
  grep -qE "^oop +64K $algo +[0-9]+\.[0-9]{3} [0-9]+\.[0-9]{3} +median [0-9]+\.[0-9]{3}$" <<< "$out" ||
    fail "no two figures for $algo"
done
echo "algo_ab OK"
