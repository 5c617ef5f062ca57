#!/usr/bin/env bash
# Slurm on the test bed (tools/cluster): munged, slurmctld on node 1 and one slurmd per node (each
# in its node's namespaces, so all listen on Slurm's usual ports), no systemd and no cgroups
# (proctrack/linuxproc, task/none). The configuration, spool, state and logs live under the
# cluster's state directory; clients find them through SLURM_CONF.
#
#   slurm.sh up        start the daemons on every node of the running cluster; prints the
#                      SLURM_CONF line to export
#   slurm.sh down      stop them (and munged, when this script started it)
#   slurm.sh conf      the path of slurm.conf
# Run srun/sbatch on a node: SLURM_CONF=$(slurm.sh conf) cluster.sh exec 1 srun -N 2 ...
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cluster=$here/cluster.sh
name=${LOOM_CLUSTER:-lc}
state=/run/loom-cluster/$name
dir=$state/slurm
conf=$dir/slurm.conf

die() { echo "slurm: $*" >&2; exit 1; }

up() {
  [ -e "$state/count" ] || die "up: cluster '$name' is not up (cluster.sh up N first)"
  for b in munged slurmctld slurmd srun sbatch scontrol; do
    command -v "$b" >/dev/null || die "up: $b is not installed (Debian: slurmctld slurmd slurm-client munge)"
  done
  local n; n=$(cat "$state/count")
  mkdir -p "$dir/ctld"
  for i in $(seq 1 "$n"); do mkdir -p "$dir/spool-${name}node$i"; done
  # munge authenticates Slurm's messages; one daemon serves every node (a filesystem socket
  # crosses network namespaces).
  if ! munge -n </dev/null >/dev/null 2>&1; then
    [ -s /etc/munge/munge.key ] || { mkdir -p /etc/munge; dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null; }
    chown munge:munge /etc/munge/munge.key 2>/dev/null || true
    chmod 400 /etc/munge/munge.key
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
    if id munge >/dev/null 2>&1; then
      runuser -u munge -- munged
    else
      munged --force
    fi
    touch "$dir/munged-started-here"
    for _ in $(seq 1 50); do munge -n </dev/null >/dev/null 2>&1 && break; sleep 0.1; done
    munge -n </dev/null >/dev/null 2>&1 || die "up: munged does not answer"
  fi
  local cpus; cpus=$(nproc)
  {
    echo "# Written by tools/cluster/slurm.sh for test-bed cluster '$name'."
    echo "ClusterName=loom$name"
    echo "SlurmctldHost=${name}node1($("$cluster" addr 1))"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "SlurmdParameters=config_overrides"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_CPU"
    echo "SchedulerType=sched/builtin"
    echo "MpiDefault=none"
    echo "ReturnToService=2"
    echo "StateSaveLocation=$dir/ctld"
    echo "SlurmdSpoolDir=$dir/spool-%n"
    echo "SlurmctldPidFile=$dir/slurmctld.pid"
    echo "SlurmdPidFile=$dir/slurmd-%n.pid"
    echo "SlurmctldLogFile=$dir/slurmctld.log"
    echo "SlurmdLogFile=$dir/slurmd-%n.log"
    echo "SlurmctldTimeout=30"
    echo "SlurmdTimeout=30"
    echo "InactiveLimit=0"
    echo "KillWait=5"
    echo "MinJobAge=5"
    # Each node offers the machine's cores: the nodes share them, as the test bed's nodes do.
    for i in $(seq 1 "$n"); do
      echo "NodeName=${name}node$i NodeAddr=$("$cluster" addr "$i") CPUs=$cpus State=UNKNOWN"
    done
    echo "PartitionName=bed Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES"
  } > "$conf"
  export SLURM_CONF=$conf
  "$cluster" exec 1 slurmctld -f "$conf" -i
  for i in $(seq 1 "$n"); do
    "$cluster" exec "$i" slurmd -f "$conf" -N "${name}node$i"
  done
  # Wait until every node is idle.
  for _ in $(seq 1 100); do
    local idle
    idle=$("$cluster" exec 1 sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l || echo 0)
    [ "$idle" = "$n" ] && { echo "export SLURM_CONF=$conf"; return 0; }
    sleep 0.2
  done
  "$cluster" exec 1 sinfo -N >&2 || true
  tail -20 "$dir/slurmctld.log" >&2 || true
  die "up: the nodes did not become idle"
}

down() {
  [ -d "$dir" ] || return 0
  for f in "$dir"/slurmd-*.pid "$dir"/slurmctld.pid; do
    [ -e "$f" ] && kill -TERM "$(cat "$f")" 2>/dev/null || true
  done
  for _ in $(seq 1 50); do
    local alive=0
    for f in "$dir"/slurmd-*.pid "$dir"/slurmctld.pid; do
      [ -e "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && alive=1
    done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for f in "$dir"/slurmd-*.pid "$dir"/slurmctld.pid; do
    [ -e "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null || true
  done
  if [ -e "$dir/munged-started-here" ]; then
    pkill -x munged 2>/dev/null || true
  fi
  rm -rf "$dir"
  echo "slurm: down"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  conf) echo "$conf" ;;
  *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
