#!/usr/bin/env bash
# Two "hosts" (network namespaces joined by a veth pair) that share only a file system: init
# through a file:// store, with no MASTER_ADDR to route by and no LOCAL_WORLD_SIZE. Each rank
# must listen where the other can reach it, not on loopback.
# Needs root and `ip netns`; exits 77 (CTest: skipped) with the reason where not permitted.
set -u
perf=$1
tag=loomf$$
ns_a=$tag-a ns_b=$tag-b
dir=$(mktemp -d)
cleanup() {
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
skip() { echo "SKIPPED: $*"; exit 77; }

[ "$(id -u)" = 0 ] || skip "network namespaces need root"
command -v ip >/dev/null || skip "ip (iproute2) is not installed"
ip netns add "$ns_a" 2>/dev/null || skip "ip netns add is not permitted here"
ip netns add "$ns_b" || skip "ip netns add is not permitted here"
ip link add "$tag"a type veth peer name "$tag"b || skip "cannot create a veth pair"
ip link set "$tag"a netns "$ns_a" && ip link set "$tag"b netns "$ns_b" || exit 1
ip -n "$ns_a" addr add 10.213.78.1/24 dev "$tag"a && ip -n "$ns_b" addr add 10.213.78.2/24 dev "$tag"b
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
ip -n "$ns_a" link set "$tag"a up && ip -n "$ns_b" link set "$tag"b up || exit 1

common=(-u MASTER_ADDR -u MASTER_PORT -u LOCAL_WORLD_SIZE -u LOOM_SOCKET_IFNAME
        LOOM_INIT_METHOD=file://$dir/store WORLD_SIZE=2 LOOM_DEBUG=INFO LOOM_TIMEOUT=30)
ip netns exec "$ns_a" env "${common[@]}" RANK=0 "$perf" -b 8 -e 64K -f 16 -n 2 -w 1 --check > "$dir/out0" 2>&1 &
pid0=$!
ip netns exec "$ns_b" env "${common[@]}" RANK=1 "$perf" -b 8 -e 64K -f 16 -n 2 -w 1 --check > "$dir/out1" 2>&1 &
pid1=$!
rc=0
wait $pid0 || rc=1
wait $pid1 || rc=1
show() { echo "--- rank 0"; cat "$dir/out0"; echo "--- rank 1"; cat "$dir/out1"; }
[ $rc = 0 ] || { show; echo "FAIL: a rank failed"; exit 1; }
grep -q "out of bounds values : 0 OK" "$dir/out0" || { show; echo "FAIL: wrong results"; exit 1; }
grep -q "tcp at 10.213.78.1:" "$dir/out0" || { show; echo "FAIL: rank 0 does not listen on its veth"; exit 1; }
grep -q "tcp at 10.213.78.2:" "$dir/out1" || { show; echo "FAIL: rank 1 does not listen on its veth"; exit 1; }
echo "file:// init across two network namespaces: each rank listens on its veth, 0 wrong"
