// Snapshots of a training run: model parameters, optimizer state, and where the run stands.
// Rank 0 writes them atomically (temporary file, fsync, rename, fsync of the folder) with a
// CRC32 over the contents; at start every rank resumes from the newest snapshot that checks out.
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
  std::uint64_t step_in_epoch = 0;  // batches of it already done
  std::uint64_t global_step = 0;    // optimizer steps so far
  std::uint64_t seed = 0;           // the run's seed: initialisation, data, shuffling
};

// Writes dir/snapshot-<global_step>.loom and removes all but the newest `keep` snapshots.
// Returns the path written.
std::string save_snapshot(const std::string& dir, Module& model, Optimizer& optimizer,
                          const TrainingState& state, int keep = 3);

// Every rank: rank 0 finds the newest snapshot in `dir` that is complete, uncorrupted and fits
// this model (others are skipped with a warning naming them and why), and broadcasts it; every
// rank loads it into `model` and `optimizer`. nullopt when there is none (a fresh start).
std::optional<TrainingState> resume_from_newest(Communicator& comm, const std::string& dir,
                                                Module& model, Optimizer& optimizer);
// The same for a single process.
std::optional<TrainingState> resume_from_newest(const std::string& dir, Module& model,
                                                Optimizer& optimizer);

}  // namespace loom::ddp
