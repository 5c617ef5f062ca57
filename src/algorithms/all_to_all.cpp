// Pairwise all-to-all: in step k each rank exchanges with two others at once, sending its block
// for rank r+k and receiving rank r-k's block for it; over n-1 steps every pair meets once, and
// no rank is the target of two senders in one step. all_to_all_v is the same with uneven blocks;
// an empty block still travels as an empty message, so counts that disagree between two ranks
// are a mismatch at this call, not a wait.
#include "algorithms/algorithms.hpp"
#include "algorithms/all_to_all_blocks.hpp"
#include "algorithms/primitives.hpp"

namespace loom::algorithms {

void pairwise_all_to_all(Engine& engine, const Collective& call) {
  const int n = engine.size(), r = engine.rank();
  const std::size_t elem = size_of(call.dtype);
  const AllToAllBlocks blocks(call);
  const auto* in = static_cast<const std::byte*>(call.in);
  auto* out = static_cast<std::byte*>(call.out);
  blocks.check_kept(r);
  const auto [own_from, own_count] = blocks.sent_to(r);
  // Outgrowing the cache, the copies into and out of the slots stream past it: cached, each would
  // evict what the next one reads, and the output's lines would be read before being written.
  // Measured, 4 ranks on 2 cores (Zen 4, 32 MiB L3), 16 MiB per rank: 4.6-6.0 ms, not 8.7-10.
  std::size_t total = 0;
  for (int j = 0; j < n; ++j) total += blocks.sent_to(j).second + blocks.received_from(j).second;
  const bool streaming = engine.beyond_cache(total * elem);
  // The input is read and the output written once (unless a v-layout makes them overlap).
  const bool caller_memory = !blocks.buffers_overlap(n);
  if (own_count > 0) {
    std::byte* own_out = out + blocks.received_from(r).first * elem;
    if (streaming)
      engine.data().copy_streaming(own_out, in + own_from * elem, own_count * elem);
    else
      engine.data().copy(own_out, in + own_from * elem, own_count * elem);
  }
  for (int k = 1; k < n; ++k) {
    const int to = positive_mod(r + k, n), from = positive_mod(r - k, n);
    const auto [send_at, send_count] = blocks.sent_to(to);
    const auto [recv_at, recv_count] = blocks.received_from(from);
    // Connections are made at first use: rank r+k's first, then rank r-k's, on every rank (an
    // order left to the compiler's argument evaluation could differ between builds and close a
    // cycle of ranks each waiting for a peer to connect).
    transport::Connection& next = engine.connection(to);
    transport::Connection& prev = engine.connection(from);
    Primitives prims(engine, &prev, &next);
    prims.stream_copies(streaming);
    prims.use_caller_memory(caller_memory);
    prims.send_recv(in + send_at * elem, send_count, out + recv_at * elem, recv_count,
                    blocks.uneven());
  }
}

}  // namespace loom::algorithms
