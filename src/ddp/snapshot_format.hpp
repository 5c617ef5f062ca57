// The bytes of a snapshot: how a model, its optimizer and a TrainingState are written, and how a
// file is checked before anything in it is used.
//   "LOOMSNAP" | u32 version | u32 run id length, run id | TrainingState (epoch, step_in_epoch,
//   global_step, seed; then samples_in_epoch from version 3; then fence from version 4) |
//   i64 optimizer steps | f64 lr | u64 tensor count |
//   per tensor: u64 name length, name, u64 elements, floats | u32 CRC32 of everything before it
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "loom/ddp/checkpoint.hpp"
#include "loom/ddp/layers.hpp"
#include "loom/ddp/optim.hpp"

namespace loom::ddp::snapshot {

constexpr std::uint32_t kVersion = 4;
constexpr std::uint32_t kOldestVersion = 2;  // still read
constexpr std::size_t kMaxRunId = 64;
constexpr std::size_t kMagicBytes = 8;
// Everything up to the tensors, with the longest run id.
constexpr std::size_t kMaxHeaderBytes = kMagicBytes + 4 + 4 + kMaxRunId + 6 * 8 + 8 + 8 + 8;

// What precedes the tensors: enough to tell whose snapshot a file is and how big it must be.
struct Header {
  std::uint32_t version = kVersion;
  std::string run_id;
  TrainingState state;  // state.fence: the claim of the job that wrote it (0 before version 4)
  std::int64_t optimizer_steps = 0;
  double lr = 0;
  std::uint64_t tensors = 0;
};

// The header at the start of `bytes` (a file's first kMaxHeaderBytes or fewer). InvalidArgument
// naming `source` where it is not one this build reads.
Header read_header(const unsigned char* bytes, std::size_t size, const std::string& source);

// The size of a snapshot of this model and optimizer written by run `run_id` in `version`.
std::size_t encoded_size(Module& model, Optimizer& optimizer, const std::string& run_id,
                         std::uint32_t version = kVersion);

std::vector<unsigned char> encode(Module& model, Optimizer& optimizer, const TrainingState& state,
                                  const std::string& run_id);

// Checks everything before touching the model, so that a bad snapshot changes nothing: then
// loads model and optimizer and returns the state. InvalidArgument naming `source` otherwise.
TrainingState decode(const std::vector<unsigned char>& bytes, const std::string& source,
                     Module& model, Optimizer& optimizer);

// The run id as it appears in file names: letters, digits, '_' and '-' (no '.', which ends it).
// InvalidArgument otherwise.
void check_run_id(const std::string& run_id);

}  // namespace loom::ddp::snapshot
