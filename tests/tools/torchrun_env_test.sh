#!/usr/bin/env bash
# torchrun and loomrun give a worker the same variables: one node, 2 workers, a c10d rendezvous
# with one run id and --max-restarts 1, each worker's environment compared with the launcher's
# own. Every variable torchrun adds must be set by loomrun to the same value, except those that
# name something torchrun-specific (its error file, NCCL's flags) or a port picked at random;
# MASTER_ADDR must name the same host (torchrun gives a host name, loomrun an address).
# Skips (77) where torchrun is not installed or cannot start here.
set -u
loomrun=$1
source "$(dirname "$0")/lib.sh"
torchrun=$(command -v torchrun) || skip "torchrun is not installed (tools/deps.sh --torch)"

clean_env=(env -i PATH=/usr/bin:/bin HOME="$dir" LOOM_SECRET=env-test)
worker='env | sort > "$0.$LOCAL_RANK"'
# (underscore spellings: torchrun before 2.0 knows no other)
launch() {
  "${clean_env[@]}" "$1" --nnodes 1 --nproc_per_node 2 --rdzv_backend c10d \
    --rdzv_endpoint "127.0.0.1:$(free_port)" --rdzv_id envtest --max_restarts 1 "${@:2}"
}
"${clean_env[@]}" sh -c 'env | sort' > "$dir/parent"
# (--redirects 2 --tee 2: torch 1.13 on Python 3.11 cannot parse redirects of 0, the default)
launch "$torchrun" --redirects 2 --tee 2 --log_dir "$dir/torch-logs" --no_python sh -c "$worker" \
  "$dir/torch" > "$dir/torch.log" 2>&1 ||
  skip "torchrun cannot start here: $(tail -1 "$dir/torch.log")"
launch "$loomrun" sh -c "$worker" "$dir/loom" > "$dir/loom.log" 2>&1 || fail "loomrun: $(cat "$dir/loom.log")"

for local in 0 1; do
  added=$(comm -13 "$dir/parent" "$dir/torch.$local")
  [ -n "$added" ] || fail "torchrun's worker $local got no variables"
  while IFS= read -r line; do
    name=${line%%=*}
    case "$name" in
      TORCHELASTIC_ERROR_FILE | NCCL_* | TORCH_NCCL_*) continue ;;  # torch's own machinery
      LC_CTYPE) continue ;;  # Python's locale coercion under the C locale (PEP 538)
      MASTER_ADDR)  # torchrun gives group rank 0's host name, loomrun its address: the same host
        loom_addr=$(grep "^MASTER_ADDR=" "$dir/loom.$local" | cut -d= -f2-)
        getent ahosts "${line#*=}" | grep -q "^$loom_addr " ||
          fail "worker $local: torchrun sets $line, loomrun MASTER_ADDR=$loom_addr, another host"
        continue ;;
      MASTER_PORT | TORCHELASTIC_USE_AGENT_STORE)                   # ports, stores differ
        grep -q "^$name=" "$dir/loom.$local" || fail "loomrun does not set $name"; continue ;;
    esac
    grep -qxF "$line" "$dir/loom.$local" ||
      fail "worker $local: torchrun sets $line, loomrun $(grep "^$name=" "$dir/loom.$local" || echo "does not set $name")"
  done <<< "$added"
done
echo "torchrun and loomrun: the same worker environment ($(comm -13 "$dir/parent" "$dir/torch.0" | wc -l) variables)"
