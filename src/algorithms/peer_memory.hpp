// Device memory that the ranks of one host read and write in place (CUDA IPC), as the direct
// algorithms (direct.cpp) see it: opaque handles, no CUDA types. The GPU runtime implements it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace loom::algorithms {

class PeerMemory {
 public:
  // What a peer needs to map a range of this rank's device memory.
  struct Range {
    std::array<std::uint8_t, 96> bytes{};
  };
  // What a peer needs to wait for one of this rank's signals.
  struct Signal {
    std::array<std::uint8_t, 64> bytes{};
  };
  // A rank's two signals per call: its buffers are ready (the work its stream queued before the
  // call is done), and it is done with the peers' buffers. Two, not one, so that re-recording one
  // in the next call can never overtake a peer's wait for the other.
  enum class Point : std::uint8_t { ready, done };

  virtual ~PeerMemory() = default;
  // Whether any memory is shared yet, so that a call's buffers may lie in it.
  virtual bool any() const { return true; }
  // The range [p, p + bytes) for a peer to map; nullopt when this memory cannot be shared (then
  // the call moves through the slots on every rank).
  virtual std::optional<Range> share(const void* p, std::size_t bytes) = 0;
  // A peer's shared range, mapped here (mappings are cached: making one is expensive). The range
  // comes from the peer: it must lie in memory the peer shared and hold the `bytes` the caller
  // will touch from its start, else PeerError naming the peer (never an address outside).
  virtual void* map(int peer, const Range& range, std::size_t bytes) = 0;
  // Records this rank's signal at `point` on the engine's stream, after everything queued there
  // so far, and returns what a peer needs to wait for it.
  virtual Signal record(Point point) = 0;
  // The engine's stream waits for the peer's signal (the record the peer made before it sent
  // the handle).
  virtual void wait(int peer, const Signal& signal) = 0;
};

}  // namespace loom::algorithms
