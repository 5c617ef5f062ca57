#!/usr/bin/env bash
# Two ranks on this machine, each in its own network namespace joined by a veth pair: Loom must
# treat them as two hosts (TCP between them, no shared memory) and still compute right.
# Needs root and `ip netns`; exits 77 (CTest: skipped) with the reason where not permitted.
set -u
perf=$1
source "$(dirname "$0")/lib.sh"
netns_pair loomt$$ 10.213.77

port=$(free_port)
common=(MASTER_ADDR=10.213.77.1 MASTER_PORT=$port WORLD_SIZE=2 LOOM_DEBUG=INFO LOOM_TIMEOUT=60)
ip netns exec "$ns_a" env "${common[@]}" RANK=0 "$perf" -b 8 -e 1M -f 16 -n 2 -w 1 --check > "$dir/out0" 2>&1 &
pid0=$!
ip netns exec "$ns_b" env "${common[@]}" RANK=1 "$perf" -b 8 -e 1M -f 16 -n 2 -w 1 --check > "$dir/out1" 2>&1 &
pid1=$!
rc=0
wait $pid0 || rc=1
wait $pid1 || rc=1
on_failure() { show_logs +1 "$dir/out0" "$dir/out1"; }
[ $rc = 0 ] || fail "a rank failed"
grep -q "out of bounds values : 0 OK" "$dir/out0" || fail "wrong results"
grep -q "tcp to rank(s) 1" "$dir/out0" || fail "rank 0 does not reach rank 1 over tcp"
! grep -q "shm to" "$dir/out0" "$dir/out1" || fail "shared memory across namespaces"
grep -q "2 host(s)" "$dir/out0" || fail "the topology does not show two hosts"
echo "two network namespaces: two hosts, tcp between them, 0 wrong"
