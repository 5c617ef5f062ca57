// One call as the engine sees it.
#pragma once

#include <cstdint>
#include <string>

#include "loom/loom.hpp"
#include "transports/transport.hpp"

namespace loom::algorithms {

// The largest communicator: a tag carries a root (or peer) in 20 bits, and two calls that differ
// only in their root must have different tags.
inline constexpr int kMaxWorldSize = 1 << 20;

enum class Kind : std::uint8_t {
  all_reduce = 1,
  reduce_scatter,
  all_gather,
  broadcast,
  reduce,
  barrier,
  send,
  recv
};
std::string_view to_string(Kind kind);

struct Collective {
  Kind kind;
  std::uint64_t seq;  // position in this rank's sequence of collectives (per peer for send/recv)
  DataType dtype = DataType::u8;
  ReduceOp op = ReduceOp::sum;
  std::size_t count = 0;
  int root = 0;  // root, or peer for send/recv
  const void* in = nullptr;
  void* out = nullptr;
  // GPU buffers: the device they are on (-1: host memory), the user's stream, the event that
  // marks the stream's work before the call, and the call's number among device calls.
  int device = -1;
  void* stream = nullptr;
  void* ready_event = nullptr;
  std::uint64_t device_seq = 0;

  // Carried with every slot: sequence number, kind, dtype, op, root and count, so a rank that
  // receives bytes of another call raises CollectiveMismatch naming both calls.
  const transport::Tag& tag() const {
    if (tag_.word == 0) tag_ = compute_tag();
    return tag_;
  }
  std::string describe() const;  // "all_reduce #3 (f32 x 1024, sum)"

 private:
  transport::Tag compute_tag() const;
  mutable transport::Tag tag_;  // computed once per call: every slot carries it
};

// The call a tag stands for, as a sentence: "broadcast(f32 x 1024, root 0) as collective #17".
std::string describe_tag(const transport::Tag& tag);

}  // namespace loom::algorithms
