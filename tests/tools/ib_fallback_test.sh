#!/usr/bin/env bash
# Without an RDMA device, init says that InfiniBand is unavailable and why, and reaches the
# ranks on other hosts (here: two pretend hosts, by LOOM_HOST_ID) over TCP; LOOM_IB_DISABLE=1
# says so as well. Exit 77 (skip) on a machine that has RDMA devices.
#   ib_fallback_test.sh LOOMRUN LOOM_PERF
set -euo pipefail
loomrun=$1 perf=$2
source "$(dirname "$0")/lib.sh"
if [ -d /sys/class/infiniband ] && [ -n "$(ls -A /sys/class/infiniband 2>/dev/null)" ]; then
  skip "this machine has RDMA devices: the fallback is not what runs here"
fi
out=""
on_failure() { echo "$out"; }
run() {
  timeout 120 env LOOM_DEBUG=INFO "$@" "$loomrun" --nproc-per-node 2 \
    sh -c 'LOOM_HOST_ID=pretend-host-$LOCAL_RANK exec "$0" -b 8 -e 64K -f 8 -n 2 -w 1 --check' \
    "$perf" 2>&1
}

out=$(run)
grep -q "ibverbs unavailable (no RDMA device on this host.*): TCP to the 1 rank(s) on other hosts" <<<"$out" ||
  grep -q "ibverbs unavailable (this build has no InfiniBand support" <<<"$out" ||
  fail "no log line saying that InfiniBand is unavailable and why"
grep -q "tcp to rank(s) 1" <<<"$out" || fail "rank 0 does not reach rank 1 over TCP"
grep -q "out of bounds values : 0 OK" <<<"$out" || fail "the all-reduce over TCP is wrong"

out=$(run LOOM_IB_DISABLE=1)
grep -q "ibverbs unavailable (disabled by LOOM_IB_DISABLE=1)" <<<"$out" ||
  fail "LOOM_IB_DISABLE=1 is not reported"
echo "ib fallback: OK"
