#!/usr/bin/env bash
# A multi-host test bed on one machine: N "nodes" (N <= 8), each a network namespace with its
# own hostname (UTS namespace), its own /dev/shm and /etc/hosts (mount namespace), joined through
# veth pairs to a bridge that lives in a namespace of its own. Addresses come from a private test
# subnet present only on those interfaces; nothing is added to the machine's own namespaces, so
# traffic never leaves them (or the nodes' loopback). Needs root.
#
#   cluster.sh up N [--rate RATE] [--mtu BYTES]   bring up nodes 1..N (RATE: tc tbf rate, e.g.
#                                                  1gbit, on both sides of every veth)
#   cluster.sh exec I CMD [ARG...]                 run CMD on node I (1-based), in the caller's
#                                                  directory, with the caller's environment
#   cluster.sh kill I                              SIGKILL everything running on node I, as if it
#                                                  lost power (its address stays, refusing)
#   cluster.sh cut I                               cut node I off the switch: its packets vanish,
#                                                  with no error on either side (a network split)
#   cluster.sh mend I                              join node I to the switch again
#   cluster.sh addr I                              node I's address
#   cluster.sh pids I                              the processes running on node I, one per line
#   cluster.sh hosts                               the node names, one per line
#   cluster.sh down                                stop everything on the nodes, remove them and
#                                                  verify that nothing is left
#   cluster.sh status
# LOOM_CLUSTER (default "lc") names the cluster, so that test runs do not collide; hostnames are
# ${LOOM_CLUSTER}node1.. and the subnet is 10.213.<octet>.0/24, octet derived from the name.
set -euo pipefail

name=${LOOM_CLUSTER:-lc}
[[ $name =~ ^[a-z][a-z0-9]{0,5}$ ]] || { echo "cluster: LOOM_CLUSTER='$name': 1-6 lowercase letters/digits" >&2; exit 2; }
state=/run/loom-cluster/$name
octet=$(( $(printf '%s' "$name" | cksum | cut -d' ' -f1) % 200 + 20 ))
subnet=10.213.$octet
switch=${name}-sw

die() { echo "cluster: $*" >&2; exit 1; }
node_ns() { echo "${name}-n$1"; }
node_host() { echo "${name}node$1"; }
node_addr() { echo "$subnet.$1"; }
count() { cat "$state/count" 2>/dev/null || echo 0; }

up() {
  local n=$1; shift
  local rate="" mtu=1500
  while [ $# -gt 0 ]; do
    case "$1" in
      --rate) rate=$2; shift 2 ;;
      --mtu) mtu=$2; shift 2 ;;
      *) die "up: unknown option $1" ;;
    esac
  done
  [[ $n =~ ^[1-8]$ ]] || die "up: N must be 1..8"
  [ "$(id -u)" = 0 ] || die "up: needs root (network, UTS and mount namespaces)"
  [ -e "$state/count" ] && die "up: cluster '$name' is already up (cluster.sh down first)"
  mkdir -p "$state"
  echo "$n" > "$state/count"
  {
    echo "127.0.0.1 localhost"
    for i in $(seq 1 "$n"); do echo "$(node_addr "$i") $(node_host "$i")"; done
  } > "$state/hosts"

  ip netns add "$switch"
  ip -n "$switch" link add br0 type bridge
  ip -n "$switch" link set br0 mtu "$mtu" up
  ip -n "$switch" link set lo up
  for i in $(seq 1 "$n"); do
    local ns; ns=$(node_ns "$i")
    ip netns add "$ns"
    # Created inside the switch namespace, then one end moves to the node: never in the root one.
    ip -n "$switch" link add "v$i" mtu "$mtu" type veth peer name eth0 mtu "$mtu" netns "$ns"
    ip -n "$switch" link set "v$i" master br0 up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$(node_addr "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    if [ -n "$rate" ]; then
      # tbf: the bucket holds a few full-size segments (GSO sends up to 64 KiB at once).
      tc -n "$ns" qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 20ms
      tc -n "$switch" qdisc add dev "v$i" root tbf rate "$rate" burst 256kb latency 20ms
    fi
    # A process holds the node's UTS and mount namespaces (its hostname, a fresh tmpfs on
    # /dev/shm, /etc/hosts naming the nodes); exec joins them through /proc/PID/ns, which works
    # from any mount namespace, a node's included.
    # (nsenter, not ip netns exec: that remounts /sys, hiding the cgroup mounts slurmd reads.)
    nsenter --net="/run/netns/$ns" unshare --uts --mount --propagation private sh -c \
      'hostname "$1" && mount -t tmpfs -o mode=1777,size=50% tmpfs /dev/shm &&
       mount --bind "$2" /etc/hosts && exec sleep infinity' \
      sh "$(node_host "$i")" "$state/hosts" </dev/null >/dev/null 2>&1 &
    echo $! > "$state/pid$i"
  done
  for i in $(seq 1 "$n"); do
    local pid; pid=$(cat "$state/pid$i")
    for _ in $(seq 1 100); do
      [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = sleep ] && break
      sleep 0.05
    done
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = sleep ] || die "up: node $i did not start"
  done
  echo "$rate" > "$state/rate"
  echo "cluster $name: $n node(s) up, $subnet.1-$n${rate:+, links shaped to $rate}, mtu $mtu"
}

run_on() {
  local i=$1; shift
  [ -e "$state/count" ] || die "exec: cluster '$name' is not up"
  [[ $i =~ ^[0-9]+$ ]] && [ "$i" -ge 1 ] && [ "$i" -le "$(count)" ] || die "exec: no node $i"
  exec nsenter --target "$(cat "$state/pid$i")" --net --uts --mount --wd="$PWD" -- "$@"
}

# Everything on node I but the process that holds its namespaces.
kill_node() {
  local i=$1 holder pids
  holder=$(cat "$state/pid$i")
  pids=$(ip netns pids "$(node_ns "$i")" | grep -vx "$holder" || true)
  [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
  return 0
}

# Node I's end stays up (no carrier change, no error): the switch just no longer forwards it.
cut_node() {
  [ -e "/run/netns/$(node_ns "$1")" ] || die "cut: no node $1"
  ip -n "$switch" link set "v$1" nomaster
}
mend_node() {
  [ -e "/run/netns/$(node_ns "$1")" ] || die "mend: no node $1"
  ip -n "$switch" link set "v$1" master br0
}

down() {
  local n; n=$(count)
  for i in $(seq 1 8); do
    local ns; ns=$(node_ns "$i")
    [ -e "/run/netns/$ns" ] || continue
    # Everything still running on the node: TERM, then KILL.
    local pids; pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -n "$pids" ] && kill -TERM $pids 2>/dev/null || true
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      pids=$(ip netns pids "$ns" 2>/dev/null || true)
      [ -z "$pids" ] && break
      sleep 0.2
    done
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  [ -e "/run/netns/$switch" ] && ip netns del "$switch"
  rm -rf "$state"
  # Verify.
  local left=""
  ip netns list | grep -qE "^${name}-(n[0-9]|sw)( |$)" && left+=" namespaces"
  [ -e "$state" ] && left+=" state"
  [ -z "$left" ] || die "down: left behind:$left"
  echo "cluster $name: down${n:+ ($n node(s) removed)}, nothing left"
}

status() {
  [ -e "$state/count" ] || { echo "cluster $name: down"; return 0; }
  local n; n=$(count)
  echo "cluster $name: $n node(s), rate '$(cat "$state/rate")'"
  for i in $(seq 1 "$n"); do
    echo "  node $i: $(node_host "$i") $(node_addr "$i") ($(ip netns pids "$(node_ns "$i")" | wc -l) processes)"
  done
}

cmd=${1:-}
[ -n "$cmd" ] && shift
case "$cmd" in
  up) [ $# -ge 1 ] || die "usage: cluster.sh up N [--rate RATE] [--mtu BYTES]"; up "$@" ;;
  exec) [ $# -ge 2 ] || die "usage: cluster.sh exec I CMD [ARG...]"; run_on "$@" ;;
  addr) node_addr "$1" ;;
  pids) [ $# -ge 1 ] || die "usage: cluster.sh pids I"; ip netns pids "$(node_ns "$1")" ;;
  kill) [ $# -ge 1 ] || die "usage: cluster.sh kill I"; kill_node "$1" ;;
  cut) [ $# -ge 1 ] || die "usage: cluster.sh cut I"; cut_node "$1" ;;
  mend) [ $# -ge 1 ] || die "usage: cluster.sh mend I"; mend_node "$1" ;;
  hosts) for i in $(seq 1 "$(count)"); do node_host "$i"; done ;;
  down) down ;;
  status) status ;;
  *) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
