#!/usr/bin/env bash
# tools/slurm/train.sbatch, run twice with one job id as Slurm does when it requeues a job
# (srun replaced by a stub that runs the program once): the second run resumes from the first
# run's snapshot, which the job id names.
set -u
root=$1 train=$2
source "$(dirname "$0")/lib.sh"
on_failure() { show_logs +1 "$dir/log"; }
mkdir "$dir/bin"
cat > "$dir/bin/srun" <<'STUB'
#!/bin/sh
while [ "${1#-}" != "$1" ]; do shift; done  # srun's options
exec "$@"
STUB
chmod +x "$dir/bin/srun"
unset LOOM_RUN_ID
requeue() {
  env PATH="$dir/bin:$PATH" SLURM_JOB_ID=4242 LOOM_TRAIN="$train" SNAPSHOT_DIR="$dir/snap" \
    SAVE_EVERY=5 bash "$root/tools/slurm/train.sbatch" --no-ddp --layers 16,32,4 --samples 512 \
    --batch-size 32 --steps 12 --calibrate-steps 0 > "$dir/log" 2>&1
}
requeue || fail "the first run failed"
ls "$dir/snap"/snapshot-slurm-4242-*.loom > /dev/null 2>&1 || fail "the first run saved no snapshot of job 4242"
requeue || fail "the requeued run failed"
grep -q "resumed at epoch 1, step 12" "$dir/log" || fail "the requeued run did not resume from step 12"
echo "train.sbatch: a requeued job resumes"
