// The ring schedule, written once: a reduce-scatter pass and an all-gather pass over any ring
// and any layout of blocks. The ring all-reduce, reduce-scatter and all-gather, and the phases
// of the hierarchical all-reduce, are these passes.
//
// Block b (one per ring position) is a contiguous run of elements; blocks move in rounds of a
// chunk each, so a round's pieces flow through the next hop while later rounds are read. In a
// reduce-scatter round, block b leaves position b+1 with that position's part, and every position
// it reaches adds its own, until it reaches position b, which adds the last part: block b is
// finished at position b. In an all-gather round, each position's piece travels once around the
// ring. The step that finishes a block may forward it at once, as the first all-gather step: one
// memory pass writes the result and the next hop's slot.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "algorithms/algorithms.hpp"
#include "algorithms/primitives.hpp"

namespace loom::algorithms {

// Whether two byte ranges share no byte.
inline bool disjoint(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return x + a_bytes <= y || y + b_bytes <= x;
}

// Where each block of a buffer lies, one block per ring position, in elements: `count` elements
// split in `parts` blocks whose lengths differ by at most one (the first count % parts are one
// longer), or the blocks an uneven call names.
class Blocks {
 public:
  static Blocks even(std::size_t count, int parts) { return Blocks(count, parts, nullptr); }
  // counts[b] elements at displs[b]: the layout must outlive the Blocks.
  static Blocks uneven(const Layout& layout) {
    return Blocks(0, static_cast<int>(layout.counts.size()), &layout);
  }
  std::size_t offset(int b) const {
    if (layout_) return layout_->displs[static_cast<std::size_t>(b)];
    const std::size_t base = count_ / parts(), extra = count_ % parts();
    return static_cast<std::size_t>(b) * base +
           std::min<std::size_t>(static_cast<std::size_t>(b), extra);
  }
  std::size_t length(int b) const {
    if (layout_) return layout_->counts[static_cast<std::size_t>(b)];
    return count_ / parts() + (static_cast<std::size_t>(b) < count_ % parts() ? 1 : 0);
  }
  std::size_t longest() const {
    if (!layout_) return length(0);
    return *std::max_element(layout_->counts.begin(), layout_->counts.end());
  }

 private:
  Blocks(std::size_t count, int parts, const Layout* layout)
      : count_(count), parts_(parts), layout_(layout) {}
  std::size_t parts() const { return static_cast<std::size_t>(parts_); }
  std::size_t count_;
  int parts_;
  const Layout* layout_;
};

class RingPasses {
 public:
  // The ring must have at least two positions; `blocks` has one block per position.
  RingPasses(Engine& engine, const RingPosition& ring, const Blocks& blocks, DataType dtype);

  // Rounds needed for the longest block.
  std::size_t rounds() const;
  // The copies out of the slots into the caller's buffer stream past the caches
  // (Primitives::stream_outputs).
  void stream_outputs(bool on) { prims_.stream_outputs(on); }
  // The input is not written until the call ends (no output overlaps it): a transport that can
  // (TCP) sends its pieces straight from it instead of copying them into a slot first.
  void input_stays(bool on) { input_stays_ = on; }

  // The reduce-scatter steps of round `round`: block b of `in` from every position, reduced
  // (divided by `divisor` for avg), lands at this position's block; its piece of this round is
  // written to finished + round * chunk. forward: the finished piece is also sent to the next
  // position (the first all-gather step of the same round), from `finished` where the transport
  // can: the finished pieces must stay unchanged until the call ends.
  void reduce_scatter_round(std::size_t round, const void* in, void* finished, int divisor,
                            bool forward);
  // The all-gather steps of round `round`: each position's block of `out` reaches every
  // position's `out`. forwarded: this position's piece was sent already (reduce_scatter_round
  // with forward).
  void all_gather_round(std::size_t round, void* out, bool forwarded);

 private:
  // Block b's piece in round `round`: its first element (in the buffer) and length.
  std::size_t at(int b, std::size_t round) const;
  std::size_t piece(int b, std::size_t round) const;
  int block(int steps_back) const { return positive_mod(ring_.position - steps_back, ring_.size); }

  RingPosition ring_;
  Blocks blocks_;
  std::size_t elem_;
  Primitives prims_;
  std::size_t chunk_;
  bool input_stays_ = false;
};

}  // namespace loom::algorithms
