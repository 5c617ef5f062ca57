// Hierarchical all-reduce for ranks spread over hosts, L ranks on each of H hosts:
//   1. reduce-scatter inside each host (shared memory): local rank l ends with the host's sum of
//      part l of the buffer (the buffer is split in L near-equal parts);
//   2. all-reduce of part l across hosts on a ring of the hosts' local ranks l (TCP): L rings run
//      at once, so every rank, and every host's link, carries traffic;
//   3. all-gather inside each host.
// A host's link carries 2(H-1)/H of the buffer each way, against 2(n-1)/n for a flat ring over
// all n = HL ranks, and the latency is 2(H-1) network hops instead of 2(n-1).
// Needs the same number of ranks on every host; selection.cpp runs the ring otherwise.
#include <cstring>

#include "algorithms/algorithms.hpp"
#include "algorithms/primitives.hpp"

namespace loom::algorithms {

namespace {

// `count` elements split in `k` parts whose lengths differ by at most one.
struct Parts {
  std::size_t count;
  int k;
  std::size_t offset(int i) const {
    const std::size_t base = count / k, extra = count % k;
    return static_cast<std::size_t>(i) * base + std::min<std::size_t>(i, extra);
  }
  std::size_t length(int i) const { return count / k + (static_cast<std::size_t>(i) < count % k); }
};

// Part `c`'s piece of the round starting `grid` elements into each part.
std::size_t piece(const Parts& parts, int c, std::size_t grid, std::size_t chunk) {
  const std::size_t len = parts.length(c);
  return grid >= len ? 0 : std::min(chunk, len - grid);
}

}  // namespace

void hierarchical_all_reduce(Engine& engine, const Collective& call) {
  const auto& hosts = engine.hosts();
  const int n = engine.size();
  const int host_count = static_cast<int>(hosts.size());
  const int local_count = static_cast<int>(hosts.front().size());
  int host = 0, local = 0;
  for (int h = 0; h < host_count; ++h)
    for (int l = 0; l < local_count; ++l)
      if (hosts[h][l] == engine.rank()) host = h, local = l;
  const std::size_t elem = size_of(call.dtype);
  auto* in = static_cast<const std::byte*>(call.in);
  auto* out = static_cast<std::byte*>(call.out);
  const int divisor = call.op == ReduceOp::avg ? n : 1;
  const Parts parts{call.count, local_count};
  auto mod = [local_count](int x) { return ((x % local_count) + local_count) % local_count; };
  const double bytes = static_cast<double>(call.count * elem);

  transport::Connection* local_prev = nullptr;
  transport::Connection* local_next = nullptr;
  if (local_count > 1) {
    local_prev = &engine.connection(hosts[host][mod(local - 1)]);
    local_next = &engine.connection(hosts[host][mod(local + 1)]);
  }
  const bool local_shm = engine.config().transport != "tcp";

  // 1. Reduce-scatter inside the host: part b travels the host's ring from local rank b+1.
  if (local_count > 1) {
    engine.set_slice_bytes(
        pipeline_slice(local_shm, bytes / local_count, local_count - 1, engine.config()));
    Primitives prims(engine, local_prev, local_next);
    const std::size_t chunk = ring_chunk_elems(engine, *local_next, call.dtype);
    const int last_divisor = host_count == 1 ? divisor : 1;
    for (std::size_t grid = 0; grid < parts.length(0); grid += chunk) {
      auto at = [&](int c) { return (parts.offset(c) + grid) * elem; };
      int c = mod(local - 1);
      prims.send(in + at(c), piece(parts, c, grid, chunk));
      for (int j = 2; j < local_count; ++j) {
        c = mod(local - j);
        prims.recv_reduce_send(in + at(c), piece(parts, c, grid, chunk));
      }
      prims.recv_reduce_copy(in + at(local), out + at(local), piece(parts, local, grid, chunk),
                             false, last_divisor);
    }
  }

  // 2. All-reduce of this rank's part with the same local rank of every other host.
  {
    const std::byte* source = local_count > 1 ? out : in;
    const std::size_t at = parts.offset(local) * elem;
    RingPosition ring{host_count, host, nullptr, nullptr};
    if (host_count > 1) {
      ring.next = &engine.connection(hosts[(host + 1) % host_count][local]);
      ring.prev = &engine.connection(hosts[(host + host_count - 1) % host_count][local]);
    }
    const double part_bytes = static_cast<double>(parts.length(local) * elem);
    engine.set_slice_bytes(pipeline_slice(false, part_bytes / std::max(1, host_count),
                                          2 * (host_count - 1), engine.config()));
    ring_all_reduce_pass(engine, ring, source + at, out + at, parts.length(local), call.dtype,
                         host_count > 1 ? divisor : 1);
  }

  // 3. All-gather inside the host: every part travels once around the host's ring.
  if (local_count > 1) {
    engine.set_slice_bytes(
        pipeline_slice(local_shm, bytes / local_count, local_count - 1, engine.config()));
    Primitives prims(engine, local_prev, local_next);
    const std::size_t chunk = ring_chunk_elems(engine, *local_next, call.dtype);
    for (std::size_t grid = 0; grid < parts.length(0); grid += chunk) {
      auto at = [&](int c) { return (parts.offset(c) + grid) * elem; };
      prims.send(out + at(local), piece(parts, local, grid, chunk));
      for (int j = 1; j < local_count - 1; ++j) {
        const int c = mod(local - j);
        prims.recv_copy_send(out + at(c), piece(parts, c, grid, chunk));
      }
      const int c = mod(local + 1);
      prims.recv(out + at(c), piece(parts, c, grid, chunk));
    }
  }
}

}  // namespace loom::algorithms
