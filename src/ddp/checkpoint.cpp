#include "loom/ddp/checkpoint.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <limits>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "loom/util.hpp"
#include "snapshot_files.hpp"
#include "snapshot_format.hpp"

namespace loom::ddp {
namespace {

namespace fs = std::filesystem;
using namespace snapshot;

// The newest snapshot's bytes that decode for this model; decode() fills model and optimizer.
// Files that are merely unusable are skipped with a warning; one that is refused (open_checked)
// ends the search with its Error.
std::optional<std::vector<unsigned char>> newest_valid(const std::string& dir,
                                                       const std::string& run_id, Module& model,
                                                       Optimizer& optimizer,
                                                       const std::string& operation) {
  warn_if_shared(dir);
  for (const auto& [step, path] : snapshots_of(dir, run_id)) {
    try {
      auto bytes = read_candidate(path, run_id, model, optimizer, operation);
      decode(bytes, path, model, optimizer);
      loom::log(LogLevel::info, fmt::format("resuming from {}", path));
      return bytes;
    } catch (const InvalidArgument& e) {
      loom::log(LogLevel::warn, fmt::format("skipping snapshot {}; trying an older one", e.what()));
    }
  }
  return std::nullopt;
}

// Takes the next claim on run_id's snapshots in dir: above the fence file's and above every
// fence a snapshot of the run was written under (should the fence file have been removed).
std::uint64_t claim(const std::string& dir, const std::string& run_id,
                    const std::string& operation) {
  fs::create_directories(dir);
  warn_if_shared(dir);
  FenceFile fence(dir, run_id, true, operation);
  const std::uint64_t highest =
      std::max(fence.read(), list_headers(dir, run_id, operation).highest_fence);
  if (highest == std::numeric_limits<std::uint64_t>::max())
    throw Error(fmt::format("{}: {}: no fence is left to claim", operation, fence.path()));
  fence.write(highest + 1);
  return highest + 1;
}

// Removes run_id's snapshots older than `step` beyond the newest `keep` (counting the one just
// written); higher steps (a file this run could not resume from), other runs' files and files
// that are not this user's are not this save's to remove.
void prune(const std::string& dir, const std::string& run_id, std::uint64_t step, int keep) {
  int kept = 1;
  for (const auto& [older_step, older] : snapshots_of(dir, run_id)) {
    if (older_step >= step) continue;
    try {
      const Fd fd = open_checked(older, "save_snapshot");
      if (header_of(fd.get(), older).run_id != run_id) continue;
    } catch (const Error& e) {  // refused, or not a snapshot: not this run's to remove
      if (e.kind() != ErrorKind::invalid_argument)
        loom::log(LogLevel::warn, fmt::format("{}; left in place", e.what()));
      continue;
    }
    if (kept < std::max(keep, 1))
      ++kept;
    else
      ::unlink(older.c_str());
  }
}

// Runs `work` on rank `root` and gives every rank its bytes. Where it throws, the root rethrows
// its exception and every other rank raises an Error with the same message: no rank is left
// waiting for bytes that never come.
std::vector<unsigned char> from_root(Communicator& comm, int root,
                                     const std::function<std::vector<unsigned char>()>& work) {
  std::vector<unsigned char> bytes;
  std::uint64_t head[2] = {0, 0};  // failed, size
  std::exception_ptr failure;
  if (comm.rank() == root) {
    try {
      bytes = work();
    } catch (const std::exception& e) {
      failure = std::current_exception();
      const std::string_view what = e.what();
      bytes.assign(what.begin(), what.end());
      head[0] = 1;
    }
    head[1] = bytes.size();
  }
  comm.broadcast(head, 2, DataType::u64, root);
  bytes.resize(head[1]);
  if (head[1] > 0) comm.broadcast(bytes.data(), head[1], DataType::u8, root);
  if (failure) std::rethrow_exception(failure);
  if (head[0] != 0) throw Error(std::string(bytes.begin(), bytes.end()));
  return bytes;
}

std::vector<unsigned char> u64_bytes(std::uint64_t v) {
  std::vector<unsigned char> bytes(sizeof(v));
  std::memcpy(bytes.data(), &v, sizeof(v));
  return bytes;
}

// The rank whose folder holds the run's newest snapshot (rank 0 where it holds one as new), or
// -1 where no rank's does. Every rank raises the lowest failing rank's error where a rank's
// folder holds a file that is refused. Warns where that rank is not 0: the ranks do not share
// one folder (node-local folders, and rank 0 moved to another node).
int holder_of_newest(Communicator& comm, const std::string& dir, const std::string& run_id,
                     const std::string& operation) {
  std::optional<std::uint64_t> mine;
  std::string error;
  try {
    mine = list_headers(dir, run_id, operation).newest_step;
  } catch (const std::exception& e) {
    error = e.what();
  }
  const auto size = static_cast<std::uint64_t>(comm.size());
  const auto rank = static_cast<std::uint64_t>(comm.rank());
  const std::uint64_t as_count =
      !mine ? 0 : std::max<std::uint64_t>(*mine, *mine + 1);  // 0: none; saturates
  std::uint64_t agreed[2] = {error.empty() ? 0u : 1u, as_count};
  comm.all_reduce(agreed, 2, DataType::u64, ReduceOp::max);
  if (agreed[0] != 0) {
    std::uint64_t first = error.empty() ? size : rank;
    comm.all_reduce(&first, 1, DataType::u64, ReduceOp::min);
    from_root(comm, static_cast<int>(first),
              [&]() -> std::vector<unsigned char> { throw Error(error); });
  }
  if (agreed[1] == 0) return -1;
  std::uint64_t holder = as_count == agreed[1] ? rank : size;
  comm.all_reduce(&holder, 1, DataType::u64, ReduceOp::min);
  if (holder != 0 && comm.rank() == 0)
    loom::log(
        LogLevel::warn,
        fmt::format("{}: rank {} holds run '{}''s newest snapshot (step {}) in {}, where "
                    "this rank finds {}: the ranks do not share one snapshot folder; "
                    "resuming from rank {}'s (snapshots are written by rank 0 only, so "
                    "the folder must be shared: docs/reliability.md)",
                    operation, holder, run_id, agreed[1] - 1, dir,
                    mine ? fmt::format("step {} at most", *mine) : std::string("none"), holder));
  return static_cast<int>(holder);
}

}  // namespace

std::string default_run_id() {
  if (const char* id = std::getenv("LOOM_RUN_ID"); id && *id) return id;
  // loomrun's and torchrun's run id (--rdzv-id); "none" is their default, no name.
  if (const char* id = std::getenv("TORCHELASTIC_RUN_ID");
      id && *id && std::string_view(id) != "none")
    return id;
  if (const char* job = std::getenv("SLURM_JOB_ID"); job && *job)
    return fmt::format("slurm-{}", job);
  return "";
}

std::string save_snapshot(const std::string& dir, Module& model, Optimizer& optimizer,
                          const TrainingState& state, int keep, const std::string& run_id) {
  check_run_id(run_id);
  fs::create_directories(dir);
  warn_if_shared(dir);
  const std::string host = host_name();
  remove_stale_temps(dir, run_id, host);
  const std::string name = run_and_step(run_id, state.global_step);
  const std::string path = fmt::format("{}/snapshot-{}.loom", dir, name);
  const std::string temp = fmt::format("{}/.snapshot-{}.tmp.{}.{}", dir, name, ::getpid(), host);
  write_new_file(temp, encode(model, optimizer, state, run_id));
  try {
    // Under the fence file's lock: a claim taken after this check waits for the rename.
    const FenceFile fence(dir, run_id, false, "save_snapshot");
    const std::uint64_t claimed = fence.read();
    if (claimed > state.fence)
      throw Error(fmt::format(
          "save_snapshot: {}: run '{}' was claimed by a newer job (fence {} in {}; this job's "
          "is {}): step {} is not written. Two jobs are training this run (a split, or a "
          "restart of the other side): this one stops (docs/reliability.md)",
          dir, run_id, claimed, fence.path(), state.fence, state.global_step));
    if (::rename(temp.c_str(), path.c_str()) != 0)
      throw Error(
          fmt::format("save_snapshot: renaming {} to {}: {}", temp, path, std::strerror(errno)));
  } catch (...) {
    ::unlink(temp.c_str());
    throw;
  }
  fsync_folder(dir);  // the rename itself must survive a crash
  prune(dir, run_id, state.global_step, keep);
  return path;
}

std::uint64_t claim_snapshots(const std::string& dir, const std::string& run_id) {
  check_run_id(run_id);
  return claim(dir, run_id, "claim_snapshots");
}

std::uint64_t claim_snapshots(Communicator& comm, const std::string& dir,
                              const std::string& run_id) {
  check_run_id(run_id);  // on every rank, so that all refuse a bad one alike
  const auto bytes = from_root(comm, 0, [&] {
    return u64_bytes(claim(dir, run_id, fmt::format("claim_snapshots: rank {}", comm.rank())));
  });
  std::uint64_t fence = 0;
  std::memcpy(&fence, bytes.data(), std::min(bytes.size(), sizeof(fence)));
  return fence;
}

std::optional<TrainingState> resume_from_newest(const std::string& dir, Module& model,
                                                Optimizer& optimizer, const std::string& run_id) {
  check_run_id(run_id);
  auto bytes = newest_valid(dir, run_id, model, optimizer, "resume_from_newest");
  if (!bytes) return std::nullopt;
  return decode(*bytes, dir, model, optimizer);
}

std::optional<TrainingState> resume_from_newest(Communicator& comm, const std::string& dir,
                                                Module& model, Optimizer& optimizer,
                                                const std::string& run_id) {
  check_run_id(run_id);  // on every rank, so that all refuse a bad one alike
  const std::string operation = fmt::format("resume_from_newest: rank {}", comm.rank());
  const int holder = holder_of_newest(comm, dir, run_id, operation);
  if (holder < 0) return std::nullopt;
  const auto bytes = from_root(comm, holder, [&] {
    auto found = newest_valid(dir, run_id, model, optimizer, operation);
    return found ? std::move(*found) : std::vector<unsigned char>{};
  });
  if (bytes.empty()) return std::nullopt;
  return decode(bytes, fmt::format("{} (from rank {})", dir, holder), model, optimizer);
}

TrainingState adopt_rank0_state(Communicator& comm, Module& model, Optimizer& optimizer,
                                const TrainingState& state) {
  const auto bytes = from_root(comm, 0, [&] { return encode(model, optimizer, state, ""); });
  if (comm.rank() == 0) return state;
  return decode(bytes, "the training state of rank 0", model, optimizer);
}

}  // namespace loom::ddp
