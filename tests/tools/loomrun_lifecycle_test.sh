#!/usr/bin/env bash
# loomrun's workers never outlive it: not when loomrun is SIGKILLed (nor does its store port stay
# in LISTEN), not on SIGHUP (a closed terminal or ssh session), and not when a launch fails
# midway (the workers already started are stopped). They do not inherit its ignored SIGPIPE.
set -u
loomrun=$1
source "$(dirname "$0")/lib.sh"
marker="$dir/worker"
# Workers are found by the marker in their command line; any left over are ended by pid.
leftovers() { pgrep -f -- "$marker" | grep -vx "${launcher:-0}"; }
cleanup() {
  for pid in $(leftovers); do kill -KILL "$pid" 2>/dev/null; done
}
on_failure() { show_logs +1 "$dir/log"; }
# Each worker becomes a sleep whose argv[0] carries the marker.
cat > "$marker.sh" <<WORKER
exec -a "$marker" sleep 600
WORKER

# SIGKILL of loomrun: the kernel kills its workers, and nothing listens on the store port.
"$loomrun" --nproc-per-node 2 bash "$marker.sh" > "$dir/log" 2>&1 &
launcher=$!
wait_for 10 '[ "$(pgrep -P "$launcher" -f -- "$marker" | wc -l)" = 2 ]' || fail "the workers did not start"
worker=$(pgrep -P "$launcher" | head -1)
port=$(tr '\0' '\n' < "/proc/$worker/environ" | sed -n 's/^MASTER_PORT=//p')
[ -n "$port" ] || fail "no MASTER_PORT in the worker's environment"
{ kill -KILL "$launcher" && wait "$launcher"; } 2>/dev/null
wait_for 5 '[ -z "$(leftovers)" ]' || fail "workers outlived loomrun (SIGKILL): $(leftovers | tr '\n' ' ')"
wait_for 5 '[ -z "$(ss -Hltn "sport = :$port")" ]' || fail "port $port still listens after loomrun died"

# SIGHUP: loomrun stops its workers and exits with 128 + 1.
"$loomrun" --nproc-per-node 2 --grace 1 bash "$marker.sh" > "$dir/log" 2>&1 &
launcher=$!
wait_for 10 '[ "$(pgrep -P "$launcher" -f -- "$marker" | wc -l)" = 2 ]' || fail "the workers did not start"
kill -HUP "$launcher"
wait "$launcher"
code=$?
[ "$code" = 129 ] || fail "SIGHUP: expected exit code 129, got $code"
grep -q "got signal 1; stopping workers" "$dir/log" || fail "SIGHUP was not handled"
[ -z "$(leftovers)" ] || fail "workers outlived loomrun (SIGHUP): $(leftovers | tr '\n' ' ')"

# Too few file descriptors for 40 workers' pipes: the launch fails midway, and the workers
# started before are stopped.
launcher=0
(ulimit -n 40 && exec "$loomrun" --nproc-per-node 40 --grace 1 bash "$marker.sh") > "$dir/log" 2>&1
code=$?
[ "$code" = 1 ] || fail "a failed launch: expected exit code 1, got $code"
grep -q "Too many open files" "$dir/log" || fail "the launch did not run out of file descriptors"
wait_for 5 '[ -z "$(leftovers)" ]' || fail "a failed launch left workers: $(leftovers | tr '\n' ' ')"
grep -Eq "cannot start rank [1-9][0-9]*: pipe" "$dir/log" || fail "no worker had started before the launch failed"
# loomrun ignores SIGPIPE for itself; its workers get the default action.
ignored=$("$loomrun" --no-prefix sh -c 'sed -n "s/^SigIgn:\t*//p" /proc/$$/status')
[ $(( 0x$ignored >> (13 - 1) & 1 )) = 0 ] || fail "the workers inherit loomrun's ignored SIGPIPE (SigIgn $ignored)"
echo "loomrun lifecycle: all checks passed"
