#!/usr/bin/env bash
# Two ranks on this machine, each in its own network namespace joined by a veth pair: Loom must
# treat them as two hosts (TCP between them, no shared memory) and still compute right.
# Needs root and `ip netns`; exits 77 (CTest: skipped) with the reason where not permitted.
set -u
perf=$1
tag=loomt$$
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
# A private test subnet, present only on these two interfaces.
ip -n "$ns_a" addr add 10.213.77.1/24 dev "$tag"a && ip -n "$ns_b" addr add 10.213.77.2/24 dev "$tag"b
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
ip -n "$ns_a" link set "$tag"a up && ip -n "$ns_b" link set "$tag"b up || exit 1

port=$(( 20000 + RANDOM % 12000 ))  # below the ephemeral ports (32768-)
common=(MASTER_ADDR=10.213.77.1 MASTER_PORT=$port WORLD_SIZE=2 LOOM_DEBUG=INFO LOOM_TIMEOUT=60)
ip netns exec "$ns_a" env "${common[@]}" RANK=0 "$perf" -b 8 -e 1M -f 16 -n 2 -w 1 --check > "$dir/out0" 2>&1 &
pid0=$!
ip netns exec "$ns_b" env "${common[@]}" RANK=1 "$perf" -b 8 -e 1M -f 16 -n 2 -w 1 --check > "$dir/out1" 2>&1 &
pid1=$!
rc=0
wait $pid0 || rc=1
wait $pid1 || rc=1
show() { echo "--- rank 0"; cat "$dir/out0"; echo "--- rank 1"; cat "$dir/out1"; }
[ $rc = 0 ] || { show; echo "FAIL: a rank failed"; exit 1; }
grep -q "out of bounds values : 0 OK" "$dir/out0" || { show; echo "FAIL: wrong results"; exit 1; }
grep -q "tcp to rank(s) 1" "$dir/out0" || { show; echo "FAIL: rank 0 does not reach rank 1 over tcp"; exit 1; }
if grep -q "shm to" "$dir/out0" "$dir/out1"; then show; echo "FAIL: shared memory across namespaces"; exit 1; fi
grep -q "2 host(s)" "$dir/out0" || { show; echo "FAIL: the topology does not show two hosts"; exit 1; }
echo "two network namespaces: two hosts, tcp between them, 0 wrong"
