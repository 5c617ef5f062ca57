// Pairwise all-to-all: in step k each rank exchanges with two others at once, sending its block
// for rank r+k and receiving rank r-k's block for it; over n-1 steps every pair meets once, and
// no rank is the target of two senders in one step. all_to_all_v is the same with uneven blocks;
// an empty block still travels as an empty message, so counts that disagree between two ranks
// are a mismatch at this call, not a wait.
#include <utility>

#include <fmt/format.h>

#include "algorithms/algorithms.hpp"
#include "algorithms/primitives.hpp"

namespace loom::algorithms {

void pairwise_all_to_all(Engine& engine, const Collective& call) {
  const int n = engine.size(), r = engine.rank();
  const std::size_t elem = size_of(call.dtype);
  const bool uneven = call.layout != nullptr;
  auto send_block = [&](int to) {
    const auto j = static_cast<std::size_t>(to);
    return uneven ? std::pair{call.layout->send_displs[j], call.layout->send_counts[j]}
                  : std::pair{j * call.count, call.count};
  };
  auto recv_block = [&](int from) {
    const auto j = static_cast<std::size_t>(from);
    return uneven ? std::pair{call.layout->displs[j], call.layout->counts[j]}
                  : std::pair{j * call.count, call.count};
  };
  const auto* in = static_cast<const std::byte*>(call.in);
  auto* out = static_cast<std::byte*>(call.out);
  const auto [own_from, own_count] = send_block(r);
  const auto [own_to, own_expected] = recv_block(r);
  if (own_count != own_expected)
    throw CollectiveMismatch(fmt::format(
        "{}: rank {}: send_counts[{}] = {} but recv_counts[{}] = {}: the block a rank keeps must "
        "be the same size on both sides",
        call.describe(), r, r, own_count, r, own_expected));
  if (own_count > 0)
    engine.data().copy(out + own_to * elem, in + own_from * elem, own_count * elem);
  for (int k = 1; k < n; ++k) {
    const int to = positive_mod(r + k, n), from = positive_mod(r - k, n);
    const auto [send_at, send_count] = send_block(to);
    const auto [recv_at, recv_count] = recv_block(from);
    Primitives(engine, &engine.connection(from), &engine.connection(to))
        .send_recv(in + send_at * elem, send_count, out + recv_at * elem, recv_count, uneven);
  }
}

}  // namespace loom::algorithms
