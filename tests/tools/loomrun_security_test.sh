#!/usr/bin/env bash
# loomrun across nodes: the store listens on --master-addr only, and never without a job secret
# unless --insecure; a client without the secret can neither read the store's keys nor publish
# an abort record, and the job runs to its end.
set -u
loomrun=$1 probe=$2 perf=$3
source "$(dirname "$0")/lib.sh"
unset LOOM_SECRET LOOM_SECRET_FILE

# Two nodes, no secret: refused, saying how to go on, and no worker runs.
out=$("$loomrun" --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 --master-port "$(free_port)" \
  touch "$dir/ran" 2>&1)
code=$?
[ "$code" = 2 ] || fail "no secret across nodes: expected exit code 2, got $code: $out"
{ echo "$out" | grep -q -- "--secret-file" && echo "$out" | grep -q -- "--insecure"; } ||
  fail "the refusal does not say how to give a secret or go on without: $out"
[ ! -e "$dir/ran" ] || fail "a worker ran although loomrun refused to start"

# --insecure: it runs, says so, and still listens on --master-addr only.
port=$(free_port)
"$loomrun" --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 --master-port "$port" --insecure \
  sh -c "ss -Hltn 'sport = :$port' > '$dir/listening'" > "$dir/log" 2>&1 ||
  fail "--insecure: the run failed: $(cat "$dir/log")"
grep -q "warning: --insecure" "$dir/log" || fail "--insecure runs without a warning: $(cat "$dir/log")"
[ "$(awk '{print $4}' "$dir/listening")" = "127.0.0.1:$port" ] ||
  fail "the store listens on '$(cat "$dir/listening")', not on 127.0.0.1:$port only"

# A secret file, two nodes of one rank each. Rank 0 first probes the store as a stranger.
printf 'secret-%s%s\n' "$RANDOM" "$RANDOM" > "$dir/secret"
chmod 600 "$dir/secret"
cat > "$dir/worker.sh" <<WORKER
stranger() { env -u LOOM_SECRET -u LOOM_SECRET_FILE "$probe" 127.0.0.1 "\$MASTER_PORT" "\$@"; }
member() { "$probe" 127.0.0.1 "\$MASTER_PORT" "\$@"; }
if [ "\$RANK" = 0 ]; then
  ss -Hltn "sport = :\$MASTER_PORT" > "$dir/listening"
  member put probe/key > /dev/null; echo "member put: \$?" > "$dir/probes"
  stranger get probe/key > /dev/null; echo "stranger get: \$?" >> "$dir/probes"
  stranger abort "\$LOOM_RESTART_COUNT" > /dev/null; echo "stranger abort: \$?" >> "$dir/probes"
  echo "member sees: \$(member has-abort "\$LOOM_RESTART_COUNT")" >> "$dir/probes"
fi
exec "$perf" -b 64K -e 64K -n 20 -w 1 --check
WORKER
port=$(free_port)
for node in 0 1; do
  "$loomrun" --nnodes 2 --node-rank "$node" --master-addr 127.0.0.1 --master-port "$port" \
    --secret-file "$dir/secret" sh "$dir/worker.sh" > "$dir/node$node" 2>&1 &
  eval "node$node=\$!"
done
wait "$node0" || fail "node 0 failed: $(cat "$dir/node0" "$dir/probes")"
wait "$node1" || fail "node 1 failed: $(cat "$dir/node1")"
expected="member put: 0
stranger get: 3
stranger abort: 3
member sees: no abort record"
[ "$(cat "$dir/probes")" = "$expected" ] || fail "probes of the store: $(cat "$dir/probes")"
[ "$(awk '{print $4}' "$dir/listening")" = "127.0.0.1:$port" ] ||
  fail "the store listens on '$(cat "$dir/listening")', not on 127.0.0.1:$port only"
grep -q "out of bounds values : 0 OK" "$dir/node0" || fail "the job did not check out: $(cat "$dir/node0")"
echo "loomrun security: all checks passed"
