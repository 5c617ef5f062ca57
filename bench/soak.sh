#!/usr/bin/env bash
# The soak: rounds of loom-soak jobs (random collectives and sends, every result checked exactly)
# of 4 to 8 ranks under loomrun, alternating --on-failure shrink and --max-restarts, while ranks
# are SIGKILLed and SIGSTOPped at random. Every round must end on its own (no hang), with no wrong
# value, and every failure a worker reports must name a rank.
#   bench/soak.sh                      20 minutes (the issue's soak)
#   bench/soak.sh --seconds 120        the CI version
#   options: --build DIR (default build), --ranks-min N --ranks-max N, --seed N
# At the end: rounds, faults injected (kills, stops), hangs, wrong values, failures reported and
# how many named no rank; exits 1 on a hang, a wrong value, an unnamed failure or a round that
# did not finish.
set -u
cd "$(dirname "$0")/.."
seconds=1200 build=build ranks_min=4 ranks_max=8 seed=$RANDOM
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --ranks-min) ranks_min=$2; shift 2 ;;
    --ranks-max) ranks_max=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    *) echo "usage: bench/soak.sh [--seconds N] [--build DIR] [--ranks-min N] [--ranks-max N] [--seed N]"; exit 2 ;;
  esac
done
loomrun=$build/tools/loomrun soak=$build/bench/loom-soak
[ -x "$loomrun" ] && [ -x "$soak" ] || { echo "soak: build loomrun and loom-soak in $build first"; exit 2; }
RANDOM=$seed
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export LOOM_HEARTBEAT_TIMEOUT=5 LOOM_TIMEOUT=30 LOOM_TUNE_FILE=off

rounds=0 kills=0 stops=0 hangs=0 wrong=0 failures=0 unnamed=0 unfinished=0 ops=0
# The workers of a loomrun: its children.
workers_of() { pgrep -P "$1" 2>/dev/null; }

# Injects `n` faults into the workers of loomrun $1 (at most n of them, never all), at random
# times within the first half of the round.
chaos() {  # loomrun_pid n round_seconds
  local lr=$1 n=$2 half=$(($3 / 2)) i pids victim
  for ((i = 0; i < n; i++)); do
    sleep $((2 + RANDOM % half))
    mapfile -t pids < <(workers_of "$lr")
    [ "${#pids[@]}" -ge 3 ] || return 0
    victim=${pids[$((RANDOM % ${#pids[@]}))]}
    if [ $((RANDOM % 2)) = 0 ]; then
      kill -KILL "$victim" 2>/dev/null && echo kill >> "$dir/faults"
    else
      kill -STOP "$victim" 2>/dev/null && echo stop >> "$dir/faults"
    fi
  done
}

start=$SECONDS
while [ $((SECONDS - start)) -lt "$seconds" ]; do
  rounds=$((rounds + 1))
  ranks=$((ranks_min + RANDOM % (ranks_max - ranks_min + 1)))
  round_seconds=30
  if [ $((rounds % 2)) = 1 ]; then
    mode=(--on-failure shrink) faults=$((1 + RANDOM % (ranks - 2)))
  else
    mode=(--max-restarts 3) faults=1
  fi
  : > "$dir/faults"
  "$loomrun" --nproc-per-node "$ranks" "${mode[@]}" --grace 2 "$soak" --seconds "$round_seconds" \
    --seed "$RANDOM" > "$dir/round.log" 2>&1 &
  lr=$!
  chaos "$lr" "$faults" "$round_seconds" &
  chaos_pid=$!
  # A round ends on its own within its time, one restart's worth and the failure timeouts.
  bound=$((round_seconds * 4 + 60)) waited=0
  while kill -0 "$lr" 2>/dev/null && [ "$waited" -lt "$bound" ]; do sleep 1; waited=$((waited + 1)); done
  if kill -0 "$lr" 2>/dev/null; then
    hangs=$((hangs + 1))
    echo "soak: round $rounds (${ranks} ranks, ${mode[*]}) did not end within ${bound}s: a hang"
    kill -TERM "$lr"; sleep 3; pkill -KILL -P "$lr"; kill -KILL "$lr" 2>/dev/null
    cp "$dir/round.log" "soak-hang-round$rounds.log"
  fi
  wait "$lr"
  code=$?
  kill "$chaos_pid" 2>/dev/null; wait "$chaos_pid" 2>/dev/null
  # A stopped worker that loomrun did not stop itself: let it go.
  round_kills=$(grep -c kill "$dir/faults") round_stops=$(grep -c stop "$dir/faults")
  kills=$((kills + round_kills)) stops=$((stops + round_stops))
  round_wrong=$(sed -n 's/.*soak: rank [0-9]* done .* wrong \([0-9]*\) .*/\1/p' "$dir/round.log" | awk '{s += $1} END {print s + 0}')
  round_ops=$(sed -n 's/.*soak: rank [0-9]* done steps [0-9]* ops \([0-9]*\) .*/\1/p' "$dir/round.log" | awk '{s += $1} END {print s + 0}')
  wrong=$((wrong + round_wrong)) ops=$((ops + round_ops))
  round_failures=$(grep -c "soak: rank [0-9]* failure:" "$dir/round.log")
  # A failure names the rank at fault, or the one whose timeout it was.
  round_unnamed=$(grep "soak: rank [0-9]* failure:" "$dir/round.log" |
    sed 's/.*failure: //' | grep -cv "rank [0-9]")
  failures=$((failures + round_failures)) unnamed=$((unnamed + round_unnamed))
  if [ "$code" != 0 ]; then
    unfinished=$((unfinished + 1))
    cp "$dir/round.log" "soak-failed-round$rounds.log"
  fi
  echo "soak: round $rounds: $ranks ranks, ${mode[*]}: exit $code, faults $round_kills kill(s) $round_stops stop(s), ops $round_ops, wrong $round_wrong, failures $round_failures (unnamed $round_unnamed)"
done
echo "soak: $rounds rounds in $((SECONDS - start)) s; faults injected $((kills + stops)) ($kills kills, $stops stops); ops checked $ops; hangs $hangs; wrong values $wrong; failures reported $failures, unnamed $unnamed; rounds not finished $unfinished"
[ "$hangs" = 0 ] && [ "$wrong" = 0 ] && [ "$unnamed" = 0 ] && [ "$unfinished" = 0 ]
