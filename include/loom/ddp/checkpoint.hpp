// Snapshots of a training run: model parameters, optimizer state, and where the run stands.
// Rank 0 writes them atomically (temporary file, fsync, rename, fsync of the folder) with a
// CRC32 over the contents, readable by the owner only; at start every rank resumes from the
// newest snapshot that checks out. Each snapshot names the run that wrote it, so runs may share a
// folder: a run resumes from and prunes only its own. Only this user's regular files, writable by
// no one else, are read (never through a symbolic link, and a FIFO never blocks): any other file
// named as a snapshot of the run is an Error naming it. A job claims the run's snapshots in a
// folder (claim_snapshots) and saves under that claim: a job whose claim a newer one has
// superseded writes nothing more there, so two jobs never interleave one run's snapshots
// (docs/reliability.md, "Snapshots").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "loom/ddp/layers.hpp"
#include "loom/ddp/optim.hpp"
#include "loom/loom.hpp"

namespace loom::ddp {

struct TrainingState {
  std::uint64_t epoch = 0;          // the epoch in progress (the sampler's epoch)
  std::uint64_t step_in_epoch = 0;  // optimizer steps of it done (at the ranks of the time)
  std::uint64_t global_step = 0;    // optimizer steps so far
  std::uint64_t seed = 0;           // the run's seed: initialisation, data, shuffling
  // Places of the epoch's order already trained on, by all ranks together: where the sampler
  // goes on from whatever the number of ranks now (DistributedSampler::reshard). 0 in a
  // version 2 snapshot, which did not keep it: count step_in_epoch's samples at the size of then.
  std::uint64_t samples_in_epoch = 0;
  // The claim (claim_snapshots) this job saves under; a resumed state carries the claim of the
  // job that wrote the snapshot. 0: none, which any claim supersedes.
  std::uint64_t fence = 0;
};

// The run's name: LOOM_RUN_ID, else TORCHELASTIC_RUN_ID (loomrun's or torchrun's --rdzv-id,
// unless "none"), else "slurm-<SLURM_JOB_ID>" (a requeued Slurm job keeps it), else "" (the
// unnamed run). Letters, digits, '_' and '-', at most 64.
std::string default_run_id();

// Writes dir/snapshot-<run_id>-<global_step>.loom (dir/snapshot-<global_step>.loom for the unnamed
// run) and removes this run's older snapshots beyond the newest `keep`, and temporary files left
// by writers that died. Returns the path written, which is never among those removed. Writes
// nothing and raises Error where the run's snapshots in dir were claimed above state.fence.
std::string save_snapshot(const std::string& dir, Module& model, Optimizer& optimizer,
                          const TrainingState& state, int keep = 3,
                          const std::string& run_id = default_run_id());

// Claims run_id's snapshots in dir for this job: returns a fence above every claim taken there
// before (and above the fence of every snapshot of the run in dir). Save with it in
// TrainingState::fence; from then on no job that claimed before this one writes there.
std::uint64_t claim_snapshots(const std::string& dir, const std::string& run_id = default_run_id());
// Collective: rank 0 claims, every rank returns the fence (any of them may be rank 0 later, after
// Communicator::shrink). Every rank raises rank 0's error, should it fail.
std::uint64_t claim_snapshots(Communicator& comm, const std::string& dir,
                              const std::string& run_id = default_run_id());

// Every rank: the rank whose folder holds run_id's newest snapshot (rank 0 where its does; where
// another's does, the folders are not shared and a warning says so) finds the newest one that is
// complete, uncorrupted and fits this model (others are skipped with a warning naming them and
// why), and broadcasts it; every rank loads it into `model` and `optimizer`. nullopt when there
// is none (a fresh start). A file refused as above is an Error on every rank.
std::optional<TrainingState> resume_from_newest(Communicator& comm, const std::string& dir,
                                                Module& model, Optimizer& optimizer,
                                                const std::string& run_id = default_run_id());
// The same for a single process.
std::optional<TrainingState> resume_from_newest(const std::string& dir, Module& model,
                                                Optimizer& optimizer,
                                                const std::string& run_id = default_run_id());

// Collective: every rank takes rank 0's training state, parameters and optimizer state (as a
// snapshot would carry them) and returns that state. After Communicator::shrink the survivors
// may have got different distances into the step the lost rank broke off (one finished it,
// another did not); this makes them one again. InvalidArgument, changing nothing, where a
// rank's model or optimizer does not fit rank 0's.
TrainingState adopt_rank0_state(Communicator& comm, Module& model, Optimizer& optimizer,
                                const TrainingState& state);

}  // namespace loom::ddp
