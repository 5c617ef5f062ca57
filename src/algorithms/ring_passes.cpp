#include "algorithms/ring_passes.hpp"

#include <algorithm>

namespace loom::algorithms {

std::size_t ring_chunk_elems(Engine& engine, transport::Connection& next, DataType dtype) {
  std::size_t slots =
      engine.round_slices() != 0 ? engine.round_slices() : ring_round_slots(engine.slots());
  std::size_t slice = next.slot_bytes();
  if (engine.slice_bytes() != 0) slice = std::min(slice, engine.slice_bytes());
  return std::max<std::size_t>(1, slice / size_of(dtype)) * slots;
}

RingPasses::RingPasses(Engine& engine, const RingPosition& ring, const Blocks& blocks,
                       DataType dtype)
    : ring_(ring),
      blocks_(blocks),
      elem_(size_of(dtype)),
      prims_(engine, ring.prev, ring.next),
      chunk_(ring_chunk_elems(engine, *ring.next, dtype)) {}

std::size_t RingPasses::rounds() const {
  return (blocks_.longest() + chunk_ - 1) / chunk_;
}

std::size_t RingPasses::at(int b, std::size_t round) const {
  return (blocks_.offset(b) + round * chunk_) * elem_;
}

std::size_t RingPasses::piece(int b, std::size_t round) const {
  const std::size_t len = blocks_.length(b), start = round * chunk_;
  return start >= len ? 0 : std::min(chunk_, len - start);
}

void RingPasses::reduce_scatter_round(std::size_t round, const void* input, void* finished,
                                      int divisor, bool forward) {
  auto* in = static_cast<const std::byte*>(input);
  const int n = ring_.size;
  // An in-place call's input is its output, which the all-gather pass overwrites: its pieces go
  // through a slot.
  prims_.use_caller_memory(input_stays_);
  int b = block(1);
  prims_.send(in + at(b, round), piece(b, round));
  for (int j = 2; j < n; ++j) {
    b = block(j);
    prims_.recv_reduce_send(in + at(b, round), piece(b, round));
  }
  prims_.use_caller_memory(forward);
  b = ring_.position;
  prims_.recv_reduce_copy(in + at(b, round),
                          static_cast<std::byte*>(finished) + round * chunk_ * elem_,
                          piece(b, round), forward, divisor);
}

void RingPasses::all_gather_round(std::size_t round, void* output, bool forwarded) {
  auto* out = static_cast<std::byte*>(output);
  const int n = ring_.size;
  // Each piece of the output is written once, then only read.
  prims_.use_caller_memory(true);
  int b = ring_.position;
  if (!forwarded) prims_.send(out + at(b, round), piece(b, round));
  for (int j = 1; j < n - 1; ++j) {
    b = block(j);
    prims_.recv_copy_send(out + at(b, round), piece(b, round));
  }
  b = block(n - 1);
  prims_.recv(out + at(b, round), piece(b, round));
}

}  // namespace loom::algorithms
