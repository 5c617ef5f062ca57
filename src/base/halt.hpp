// Why a communicator stops: triggered once, from any thread (Communicator::abort(), the health
// monitor, or the engine's own failure), and read by the engine at every wait.
#pragma once

#include <atomic>
#include <mutex>
#include <optional>
#include <string>

#include "base/abort_record.hpp"

namespace loom::base {

class Halt {
 public:
  bool triggered() const { return flag_.load(std::memory_order_acquire); }
  // The first trigger wins; returns whether this one did. local_abort: this rank's own abort().
  bool trigger(const AbortRecord& record, bool local_abort) {
    std::lock_guard lock(mu_);
    if (flag_.load(std::memory_order_relaxed)) return false;
    record_ = record;
    local_abort_ = local_abort;
    flag_.store(true, std::memory_order_release);
    return true;
  }
  // Throws the error the halt stands for, with `context` ("all_reduce #3 (...): rank 2"): for
  // a call that was running when it came.
  [[noreturn]] void raise(const std::string& context) const {
    std::lock_guard lock(mu_);
    if (local_abort_) throw Aborted(context + ": the communicator was aborted");
    record_.raise(context);
  }
  // For a call made after it: PeerError, or CollectiveMismatch after a mismatch (a rank that
  // only sent in the mismatched call learns of it here), or Aborted after this rank's abort().
  [[noreturn]] void raise_unusable(const std::string& context) const {
    std::lock_guard lock(mu_);
    if (local_abort_) throw Aborted(context + ": the communicator was aborted");
    const std::string what =
        context + ": the communicator is unusable after an earlier failure: " + record_.cause +
        " (reported by rank " + std::to_string(record_.reporter) + ")";
    if (record_.kind == AbortRecord::Kind::mismatch) throw CollectiveMismatch(what, record_.cause);
    throw PeerError(what, record_.failed);
  }
  // The record that stopped this rank, whatever its source; nullopt while it runs.
  std::optional<AbortRecord> record() const {
    std::lock_guard lock(mu_);
    if (!flag_.load(std::memory_order_relaxed)) return std::nullopt;
    return record_;
  }
  // The record that stopped this rank, when it came from elsewhere (the health monitor, another
  // rank's record): it stands already, nothing to publish.
  std::optional<AbortRecord> record_from_elsewhere() const {
    std::lock_guard lock(mu_);
    if (!flag_.load(std::memory_order_relaxed) || local_abort_) return std::nullopt;
    return record_;
  }

 private:
  std::atomic<bool> flag_{false};
  mutable std::mutex mu_;
  AbortRecord record_;
  bool local_abort_ = false;
};

}  // namespace loom::base
