#!/usr/bin/env bash
# tools/slurm/train.sbatch on the test bed's Slurm (tools/cluster/slurm.sh), 2 nodes x 1 task:
# once the job has written a snapshot it is requeued (scontrol requeue, as after a node
# failure or preemption); the job runs again under the same id, resumes from that snapshot
# instead of starting over, and completes. Needs root and Debian's Slurm and munge; exits 77
# (CTest: skipped) with the reason otherwise.
set -u
build=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
cluster=$root/tools/cluster/cluster.sh slurm=$root/tools/cluster/slurm.sh
export LOOM_CLUSTER=q$(( $$ % 100000 ))
export LOOM_SECRET=requeue-test-$$ LOOM_TIMEOUT=60
source "$(dirname "$0")/lib.sh"
chmod 755 "$dir"
cleanup() {
  timeout 60 "$slurm" down >/dev/null 2>&1
  timeout 60 "$cluster" down >/dev/null 2>&1
}
on_failure() { show_logs 30 "$dir"/*.log; }
need_test_bed slurmctld slurmd srun sbatch scontrol munged

timeout 60 "$cluster" up 2 >/dev/null || fail "cluster up"
timeout 120 "$slurm" up > "$dir/up.log" 2>&1 || fail "slurm up"
export SLURM_CONF
SLURM_CONF=$("$slurm" conf)
on1() { "$cluster" exec 1 "$@"; }
state() { on1 scontrol show job "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }

submitted=$(LOOM_TRAIN=$build/tools/loom-train SNAPSHOT_DIR=$dir/snap SAVE_EVERY=10 on1 sbatch \
  --parsable -N 2 --ntasks-per-node=1 --open-mode=append -o "$dir/job.log" \
  "$root/tools/slurm/train.sbatch" --layers 32,512,512,4 --samples 16384 --batch-size 16 \
  --epochs 1 --calibrate-steps 0) || fail "sbatch: $submitted"
job=${submitted%%;*}
wait_for 120 '[ -n "$(ls "$dir"/snap/snapshot-slurm-"$job"-*.loom 2>/dev/null)" ]' 0.2 ||
  fail "job $job wrote no snapshot (state $(state))"
on1 scontrol requeue "$job" || fail "scontrol requeue $job"
# Slurm makes a requeued batch job eligible again only two minutes later (its EligibleTime, and
# up to a scheduling interval more: 183 s of this test's 190): nothing here needs the wait, so
# the job is made eligible at once.
wait_for 60 '[ "$(state)" = PENDING ]' 0.2 || fail "job $job was not pending after the requeue (state $(state))"
on1 scontrol update JobId="$job" StartTime=now || fail "scontrol update $job StartTime=now"
wait_for 300 '[ "$(state)" = COMPLETED ] || [ "$(state)" = FAILED ]' 0.2 || fail "job $job did not end (state $(state))"
[ "$(state)" = COMPLETED ] || fail "job $job ended $(state)"
on1 scontrol show job "$job" | grep -q "Restarts=1" || fail "job $job was not requeued once"
grep -q "resumed at epoch 1, step [1-9]" "$dir/job.log" || fail "the requeued job did not resume from its snapshot"
grep -q "summary:" "$dir/job.log" || fail "the requeued job did not finish training"
echo "train.sbatch on Slurm: requeued after a snapshot, resumed from it and completed"
