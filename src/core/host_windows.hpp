// Communicator::alloc's memory: host buffers every rank of the host maps (base/shared_file.hpp),
// so that a call whose buffers lie in them reads and writes the peers' buffers where they are
// (algorithms/direct.cpp) instead of streaming through the slots. Windows are made and freed
// collectively, so the k-th window is the same on every rank, and its number is all a call
// needs to tell a peer where its buffer is.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/peer_memory.hpp"
#include "base/shared_file.hpp"

namespace loom::core {

class HostWindows final : public algorithms::PeerMemory {
 public:
  // why_not_shared: why no window can be shared among these ranks ("one rank", "not on one host
  // over shared memory"), or empty where they can.
  HostWindows(int size, std::string why_not_shared)
      : size_(size), why_not_shared_(std::move(why_not_shared)) {}
  const std::string& why_not_shared() const { return why_not_shared_; }

  // A window: this rank's memory and, when every rank mapped every other's, the peers'. This
  // rank's memory is shared with the owners owner_of() hands out: it stays mapped while any
  // lives (the communicator may go first), where the peers' go with the window.
  struct Window {
    std::shared_ptr<base::SharedFile> own;
    std::vector<base::SharedFile> peers;  // by rank; empty when the window is not shared
  };
  void add(std::uint64_t number, Window window);
  // The number the next window takes (alloc() calls so far: the same on every rank).
  std::uint64_t next_number() { return made_++; }
  // The number of the window whose memory starts at `p`.
  std::optional<std::uint64_t> number_of(const void* p) const;
  // An owner of the memory of the window that starts at `p` (pointing at it), or null.
  std::shared_ptr<void> owner_of(const void* p) const;
  // Forgets window `number` here: unmaps the peers' memory, and its own unless an owner lives.
  void remove(std::uint64_t number);

  // PeerMemory: whether some window is shared (made so by add(), read by the engine's dispatch).
  bool any() const override { return any_.load(std::memory_order_acquire); }
  // A range inside a shared window of this rank, and its place in a peer's window. Host buffers
  // of a call are ready when it starts and done when its messages say so: the signals carry
  // nothing.
  std::optional<Range> share(const void* p, std::size_t bytes) override;
  void* map(int peer, const Range& range, std::size_t bytes) override;
  Signal record(Point) override { return {}; }
  void wait(int, const Signal&) override {}

 private:
  const int size_;
  const std::string why_not_shared_;
  mutable std::mutex mu_;  // alloc and free (the caller's thread) against calls (the engine's)
  std::map<std::uint64_t, Window> windows_;
  std::uint64_t made_ = 0;  // alloc() calls so far, on the caller's thread
  std::atomic<bool> any_{false};
};

}  // namespace loom::core
