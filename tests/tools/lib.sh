# What the shell tests here share. A test sources it first, after reading its arguments:
#   source "$(dirname "$0")/lib.sh"
# It gets a scratch folder, $dir, removed at exit after the test's own `cleanup` (where it
# defines one); `fail` and `skip` end it as CTest reads them; `wait_for` polls; `free_port` picks
# a port; `netns_pair` and `need_test_bed` set up, or skip, the tests that need network
# namespaces.

dir=$(mktemp -d)
# At exit: the test's own `cleanup` (where it defines one), the namespaces of netns_pair, $dir.
lib_at_exit() {
  declare -F cleanup >/dev/null && cleanup
  [ -n "${ns_a:-}" ] && { ip netns del "$ns_a"; ip netns del "$ns_b"; } 2>/dev/null
  rm -rf "$dir"
}
trap lib_at_exit EXIT

# fail WHY: "FAIL: WHY", then what the test's `on_failure` prints (where it defines one: its
# logs), and exit code 1.
fail() {
  echo "FAIL: $*"
  declare -F on_failure >/dev/null && on_failure
  exit 1
}

# skip WHY: "SKIPPED: WHY" and exit code 77, which CTest reports as skipped (SKIP_RETURN_CODE).
skip() {
  echo "SKIPPED: $*"
  exit 77
}

# show_logs LINES FILE...: the last LINES lines of each FILE that exists, under its name.
show_logs() {
  local lines=$1 f
  shift
  for f in "$@"; do [ -e "$f" ] && { echo "--- $f"; tail -n "$lines" "$f"; }; done
  return 0
}

# wait_for SECONDS CONDITION [INTERVAL]: evaluates CONDITION every INTERVAL seconds (0.05) until
# it holds (true) or SECONDS have passed (false).
wait_for() {
  local deadline=$((SECONDS + $1))
  until eval "$2"; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep "${3:-0.05}"
  done
}

# free_port: a port below the kernel's ephemeral range (32768 and up: no outgoing connection of
# a test running beside this one takes it) with nothing listening on it now.
free_port() {
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 12000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
  echo "$p"
}

# netns_pair TAG SUBNET: two network namespaces, $ns_a (TAG-a) and $ns_b (TAG-b), joined by a
# veth pair whose ends are SUBNET.1 and SUBNET.2 (a /24 present only there), with their loopback
# up; removed at exit. Skips where namespaces are not permitted.
netns_pair() {
  local tag=$1 subnet=$2
  ns_a=$tag-a ns_b=$tag-b
  [ "$(id -u)" = 0 ] || skip "network namespaces need root"
  command -v ip >/dev/null || skip "ip (iproute2) is not installed"
  ip netns add "$ns_a" 2>/dev/null || skip "ip netns add is not permitted here"
  ip netns add "$ns_b" || skip "ip netns add is not permitted here"
  ip link add "$tag"a type veth peer name "$tag"b || skip "cannot create a veth pair"
  ip link set "$tag"a netns "$ns_a" && ip link set "$tag"b netns "$ns_b" || exit 1
  ip -n "$ns_a" addr add "$subnet.1/24" dev "$tag"a && ip -n "$ns_b" addr add "$subnet.2/24" dev "$tag"b
  for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
  ip -n "$ns_a" link set "$tag"a up && ip -n "$ns_b" link set "$tag"b up || exit 1
}

# need_test_bed PROGRAM...: skips unless this process may make the test bed's network namespaces
# (tools/cluster, named after $LOOM_CLUSTER) and each PROGRAM is installed.
need_test_bed() {
  local b
  [ "$(id -u)" = 0 ] || skip "the test bed needs root (network namespaces)"
  for b in ip nsenter "$@"; do
    command -v "$b" >/dev/null || skip "$b is not installed (tools/deps.sh installs it)"
  done
  ip netns add "${LOOM_CLUSTER}-probe" 2>/dev/null || skip "ip netns add is not permitted here"
  ip netns del "${LOOM_CLUSTER}-probe"
}
