#!/usr/bin/env bash
# Two "hosts" (network namespaces joined by a veth pair) that share only a file system: init
# through a file:// store, with no MASTER_ADDR to route by and no LOCAL_WORLD_SIZE. Each rank
# must listen where the other can reach it, not on loopback.
# Needs root and `ip netns`; exits 77 (CTest: skipped) with the reason where not permitted.
set -u
perf=$1
source "$(dirname "$0")/lib.sh"
netns_pair loomf$$ 10.213.78

common=(-u MASTER_ADDR -u MASTER_PORT -u LOCAL_WORLD_SIZE -u LOOM_SOCKET_IFNAME
        LOOM_INIT_METHOD=file://$dir/store WORLD_SIZE=2 LOOM_DEBUG=INFO LOOM_TIMEOUT=30)
ip netns exec "$ns_a" env "${common[@]}" RANK=0 "$perf" -b 8 -e 64K -f 16 -n 2 -w 1 --check > "$dir/out0" 2>&1 &
pid0=$!
ip netns exec "$ns_b" env "${common[@]}" RANK=1 "$perf" -b 8 -e 64K -f 16 -n 2 -w 1 --check > "$dir/out1" 2>&1 &
pid1=$!
rc=0
wait $pid0 || rc=1
wait $pid1 || rc=1
on_failure() { show_logs +1 "$dir/out0" "$dir/out1"; }
[ $rc = 0 ] || fail "a rank failed"
grep -q "out of bounds values : 0 OK" "$dir/out0" || fail "wrong results"
grep -q "tcp at 10.213.78.1:" "$dir/out0" || fail "rank 0 does not listen on its veth"
grep -q "tcp at 10.213.78.2:" "$dir/out1" || fail "rank 1 does not listen on its veth"
echo "file:// init across two network namespaces: each rank listens on its veth, 0 wrong"
