// What a loom process group knows of its own failure: the first error that broke it (for
// Backend::getError) and the abort hooks that run once when it breaks or is aborted. Shared by
// the group and its operations, which may finish after the group is gone.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <string>

namespace loom_torch {

// c10d::ErrorType's values, without its header (PyTorch 1.13 has none).
enum class Failure : int { none = 0, timeout = 1, comm = 2, remote = 3 };

class GroupHealth {
 public:
  // Records `error` if it breaks the group (a timeout, a peer's failure, an abort, a mismatch;
  // not a refused argument, which leaves the group usable). True for the first such error:
  // the caller then runs the hooks.
  bool first_failure(std::exception_ptr error);
  // An explicit abort(): true if nothing had broken the group before.
  bool aborted();
  Failure failure() const { return static_cast<Failure>(failure_.load()); }

  void add_hook(std::int64_t id, std::function<void()> hook);
  void remove_hook(std::int64_t id);
  // Runs every hook once, in the order of their ids; one that raises is reported, not rethrown.
  // `where` names the group in the report.
  void run_hooks(const std::string& where);

 private:
  bool record(Failure f);
  std::atomic<int> failure_{0};
  std::mutex mu_;
  std::map<std::int64_t, std::function<void()>> hooks_;
  bool hooks_ran_ = false;
};

}  // namespace loom_torch
