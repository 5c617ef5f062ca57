// Where each block of an all-to-all is: equal blocks of `count` (all_to_all) or the call's
// counts and displacements (all_to_all_v), in elements. Shared by the all-to-all algorithms.
#pragma once

#include <cstddef>
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
  const Collective& call_;
};

}  // namespace loom::algorithms
