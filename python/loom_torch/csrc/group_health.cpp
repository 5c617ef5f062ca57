#include "group_health.hpp"

#include <c10/util/Exception.h>
#include <loom/loom.hpp>

#include <vector>

namespace loom_torch {

namespace {

Failure failure_of(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const loom::Error& e) {
    switch (e.kind()) {
      case loom::ErrorKind::invalid_argument:
        return Failure::none;
      case loom::ErrorKind::timeout:
        return Failure::timeout;
      case loom::ErrorKind::peer:
        return Failure::remote;
      default:
        return Failure::comm;
    }
  } catch (...) {
    return Failure::none;  // PyTorch's own errors (a tensor copy) leave the group as it was
  }
}

}  // namespace

bool GroupHealth::record(Failure f) {
  int none = 0;
  return f != Failure::none && failure_.compare_exchange_strong(none, static_cast<int>(f));
}

bool GroupHealth::first_failure(std::exception_ptr error) {
  return error && record(failure_of(error));
}

bool GroupHealth::aborted() {
  return record(Failure::comm);
}

void GroupHealth::add_hook(std::int64_t id, std::function<void()> hook) {
  std::lock_guard lock(mu_);
  hooks_[id] = std::move(hook);
}

void GroupHealth::remove_hook(std::int64_t id) {
  std::lock_guard lock(mu_);
  hooks_.erase(id);
}

void GroupHealth::run_hooks(const std::string& where) {
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard lock(mu_);
    if (hooks_ran_) return;
    hooks_ran_ = true;
    for (const auto& [id, hook] : hooks_) hooks.push_back(hook);
  }
  for (const auto& hook : hooks) {
    try {
      hook();
    } catch (const std::exception& e) {
      TORCH_WARN(where, ": an abort hook raised: ", e.what());
    }
  }
}

}  // namespace loom_torch
