// One call as the engine sees it.
#pragma once

#include <array>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "loom/loom.hpp"
#include "transports/transport.hpp"

namespace loom::algorithms {

// The largest communicator: a tag carries a root (or peer) in 20 bits, and two calls that differ
// only in their root must have different tags.
inline constexpr int kMaxWorldSize = 1 << 20;

// The public Operation: its values, from 1, go into every tag.
using Kind = Operation;
// Each operation once, with its names: in messages (to_string) and in LOOM_ALGO rules
// (rule_name, rules.hpp).
struct KindNames {
  Kind kind;
  std::string_view name;
  std::string_view rule;
};
inline constexpr KindNames kKindNames[] = {
    {Kind::all_reduce, "all_reduce", "allreduce"},
    {Kind::reduce_scatter, "reduce_scatter", "reducescatter"},
    {Kind::all_gather, "all_gather", "allgather"},
    {Kind::broadcast, "broadcast", "broadcast"},
    {Kind::reduce, "reduce", "reduce"},
    {Kind::barrier, "barrier", "barrier"},
    {Kind::send, "send", "send"},
    {Kind::recv, "recv", "recv"},
    {Kind::gather, "gather", "gather"},
    {Kind::scatter, "scatter", "scatter"},
    {Kind::all_to_all, "all_to_all", "alltoall"},
    {Kind::all_to_all_v, "all_to_all_v", "alltoallv"},
    {Kind::all_gather_v, "all_gather_v", "allgatherv"},
    {Kind::reduce_scatter_v, "reduce_scatter_v", "reducescatterv"},
};
inline constexpr auto kAllKinds = [] {
  std::array<Kind, std::size(kKindNames)> kinds{};
  for (std::size_t i = 0; i < kinds.size(); ++i) kinds[i] = kKindNames[i].kind;
  return kinds;
}();
// "?" for a value that is no operation.
std::string_view to_string(Kind kind);
inline bool is_point_to_point(Kind kind) {
  return kind == Kind::send || kind == Kind::recv;
}
// Whether the call reduces (its dtype and op then shape its cost, not only its bytes).
inline bool reduces(Kind kind) {
  return kind == Kind::all_reduce || kind == Kind::reduce || kind == Kind::reduce_scatter ||
         kind == Kind::reduce_scatter_v;
}

// The blocks of a call with uneven ones, in elements, one entry per rank. all_to_all_v uses all
// four; all_gather_v and reduce_scatter_v the blocks of the buffer with every rank's block (the
// same on every rank) in counts and displs.
struct Layout {
  std::vector<std::size_t> send_counts, send_displs;
  std::vector<std::size_t> counts, displs;
};

struct Collective {
  Kind kind;
  std::uint64_t seq;  // position in this rank's sequence of collectives (per peer for send/recv)
  DataType dtype = DataType::u8;
  ReduceOp op = ReduceOp::sum;
  // Elements per rank's block (gather, scatter, all_to_all), of the whole buffer (the
  // reductions, broadcast, send/recv), the sum of the blocks (all_gather_v,
  // reduce_scatter_v); 0 for all_to_all_v, whose blocks are in `layout` only.
  std::size_t count = 0;
  int root = 0;                          // root, or peer for send/recv
  std::shared_ptr<const Layout> layout;  // the uneven calls' blocks
  const void* in = nullptr;
  void* out = nullptr;
  // GPU buffers: the device they are on (-1: host memory), the user's stream, and the event that
  // marks the stream's work before the call.
  int device = -1;
  void* stream = nullptr;
  void* ready_event = nullptr;

  // The call's size for choosing an algorithm and slice, the same on every rank: count's
  // elements (0 for all_to_all_v, whose ranks know only their own blocks).
  std::size_t bytes() const;

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
