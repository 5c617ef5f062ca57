#!/usr/bin/env bash
# A remote-shell agent for launchers that reach other hosts through ssh (Open MPI's
# `--mca plm_rsh_agent`): "rsh-agent.sh HOST CMD..." runs CMD on the test-bed node named HOST.
set -euo pipefail
host=$1; shift
name=${LOOM_CLUSTER:-lc}
i=${host#"${name}node"}
[[ $host == "${name}node"* && $i =~ ^[0-9]+$ ]] || { echo "rsh-agent: '$host' is not a node of cluster '$name'" >&2; exit 255; }
exec "$(dirname "$0")/cluster.sh" exec "$i" sh -c "$*"
