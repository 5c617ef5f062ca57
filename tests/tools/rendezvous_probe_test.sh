#!/usr/bin/env bash
# A node that does not host the rendezvous store looks whether the store's host is still there
# with a connection and an authentication of its own. It did so at every poll (10 a second per
# node: 2,560 handshakes a second at 256 nodes, against a server that admits 512 pending). Now
# once a second: over 4 s of a running round, node 1's probes leave a few closed connections to
# the store's port, not dozens.
set -u
loomrun=$1
pids=()
source "$(dirname "$0")/lib.sh"
cleanup() { kill "${pids[@]}" 2>/dev/null; }
on_failure() { show_logs 20 "$dir"/*.log; }
export LOOM_SECRET=probe-test-$$
port=$(free_port)
hexport=$(printf '%04X' "$port")
for node in 0 1; do
  "$loomrun" --nnodes 2 --nproc-per-node 1 --rdzv-endpoint "127.0.0.1:$port" --rdzv-id probe \
    sh -c 'sleep 5' > "$dir/node$node.log" 2>&1 &
  pids+=($!)
  sleep 0.5  # node 0 hosts the store
done
sleep 2
# Closed client connections to the store's port (TIME_WAIT, kept 60 s), counted over 4 s.
closed() { awk -v p=":$hexport" '$3 ~ p"$" && $4 == "06"' /proc/net/tcp | wc -l; }
before=$(closed)
sleep 4
after=$(closed)
for pid in "${pids[@]}"; do wait "$pid" || fail "a loomrun failed"; done
probes=$((after - before))
[ "$probes" -le 12 ] || fail "$probes connections to the store in 4 s (at most 12 expected: one a second)"
echo "loomrun: $probes probe connections in 4 s"
