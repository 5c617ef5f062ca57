// Where each block of an all-to-all is: equal blocks of `count` (all_to_all) or the call's
// counts and displacements (all_to_all_v), in elements. Shared by the all-to-all algorithms.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

#include <fmt/format.h>

#include "algorithms/collective.hpp"
#include "loom/loom.hpp"

namespace loom::algorithms {

class AllToAllBlocks {
 public:
  explicit AllToAllBlocks(const Collective& call) : call_(call) {}
  bool uneven() const { return call_.layout != nullptr; }
  // {first element, count} of this rank's block for rank `to`, in the input.
  std::pair<std::size_t, std::size_t> sent_to(int to) const {
    const auto j = static_cast<std::size_t>(to);
    return uneven() ? std::pair{call_.layout->send_displs[j], call_.layout->send_counts[j]}
                    : std::pair{j * call_.count, call_.count};
  }
  // {first element, count} of rank `from`'s block, in the output.
  std::pair<std::size_t, std::size_t> received_from(int from) const {
    const auto j = static_cast<std::size_t>(from);
    return uneven() ? std::pair{call_.layout->displs[j], call_.layout->counts[j]}
                    : std::pair{j * call_.count, call_.count};
  }
  // One past the last element of the n ranks' blocks, in the input and in the output.
  std::size_t input_end(int n) const {
    return end(n, [this](int j) { return sent_to(j); });
  }
  std::size_t output_end(int n) const {
    return end(n, [this](int j) { return received_from(j); });
  }
  // Whether the input's blocks and the output's share any byte (all-to-all is not in place, but
  // a v-layout's blocks can still make them overlap).
  bool buffers_overlap(int n) const {
    const std::size_t elem = size_of(call_.dtype);
    const std::size_t in_bytes = input_end(n) * elem, out_bytes = output_end(n) * elem;
    const auto in = reinterpret_cast<std::uintptr_t>(call_.in);
    const auto out = reinterpret_cast<std::uintptr_t>(call_.out);
    return in_bytes > 0 && out_bytes > 0 && in < out + out_bytes && out < in + in_bytes;
  }
  // The block `rank` keeps must be the same size on both sides: CollectiveMismatch if not.
  void check_kept(int rank) const {
    const std::size_t sent = sent_to(rank).second, expected = received_from(rank).second;
    if (sent != expected)
      throw CollectiveMismatch(fmt::format(
          "{}: rank {}: send_counts[{}] = {} but recv_counts[{}] = {}: the block a rank keeps "
          "must be the same size on both sides",
          call_.describe(), rank, rank, sent, rank, expected));
  }

 private:
  template <class BlockOf>
  static std::size_t end(int n, BlockOf block_of) {
    std::size_t last = 0;
    for (int j = 0; j < n; ++j) {
      const auto [first, count] = block_of(j);
      if (count > 0) last = std::max(last, first + count);
    }
    return last;
  }
  const Collective& call_;
};

}  // namespace loom::algorithms
