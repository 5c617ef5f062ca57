// The loom backend's options (torch.distributed's Backend.Options, PyTorch 2.x): what
// init_process_group(pg_options=...), new_group(pg_options=...) and split_group pass, and what
// getBackendOptions() returns (the group's own, live: PyTorch sets the group's name and ranks on
// it). Fields left unset take Loom's settings from the LOOM_* environment.
#pragma once

#include "torch_compat.hpp"

#if LOOM_TORCH_BACKEND_API
#include <loom/loom.hpp>

#include <optional>
#include <string>

namespace loom_torch {

struct LoomOptions : c10d::Backend::Options {
  explicit LoomOptions(std::chrono::milliseconds timeout = kBackendDefaultTimeout)
      : c10d::Backend::Options("loom", timeout) {}
  c10::intrusive_ptr<c10d::Backend::Options> clone() const override {
    return c10::make_intrusive<LoomOptions>(*this);
  }

  // What a split child may change of its parent's (loom::Communicator::split's options).
  std::optional<std::string> algorithm;     // LOOM_ALGO
  std::optional<std::size_t> buffer_bytes;  // LOOM_BUFFSIZE
  std::optional<int> slots;                 // LOOM_SLOTS
  std::optional<int> sockets_per_peer;      // LOOM_NSOCKS
  std::optional<std::string> transport;     // LOOM_TRANSPORT (new groups only, not splits)

  // Loom's options for a communicator of these settings (timeout included).
  loom::Options loom() const;
};

}  // namespace loom_torch
#endif
