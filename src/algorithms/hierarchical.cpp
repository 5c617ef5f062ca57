// Hierarchical all-reduce for ranks spread over hosts, L ranks on each of H hosts:
//   1. reduce-scatter inside each host (shared memory): local rank l ends with the host's sum of
//      part l of the buffer (the buffer is split in L near-equal parts);
//   2. all-reduce of part l across hosts on a ring of the hosts' local ranks l (TCP): L rings run
//      at once, so every rank, and every host's link, carries traffic;
//   3. all-gather inside each host.
// A host's link carries 2(H-1)/H of the buffer each way, against 2(n-1)/n for a flat ring over
// all n = HL ranks, and the latency is 2(H-1) network hops instead of 2(n-1).
// Needs the same number of ranks on every host; the table (algorithm_table.cpp) refuses it
// otherwise.
#include "algorithms/ring_passes.hpp"
#include "algorithms/selection.hpp"

namespace loom::algorithms {

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
  const int divisor = call.op == ReduceOp::avg ? n : 1;
  const Blocks parts = Blocks::even(call.count, local_count);
  auto* mine = static_cast<std::byte*>(call.out) + parts.offset(local) * elem;
  const double bytes = static_cast<double>(call.count * elem);
  const SelectionInputs& links = engine.selector().inputs();

  RingPosition local_ring{local_count, local, nullptr, nullptr};
  if (local_count > 1) {
    local_ring.prev = &engine.connection(hosts[host][positive_mod(local - 1, local_count)]);
    local_ring.next = &engine.connection(hosts[host][positive_mod(local + 1, local_count)]);
    // 1. Reduce-scatter inside the host: local rank l ends with the host's part l.
    engine.set_slice_bytes(
        pipeline_slice(links, links.local, bytes / local_count, local_count - 1));
    RingPasses passes(engine, local_ring, parts, call.dtype);
    passes.input_stays(disjoint(call.in, call.count * elem, call.out, call.count * elem));
    for (std::size_t round = 0; round < passes.rounds(); ++round)
      passes.reduce_scatter_round(round, call.in, mine, host_count == 1 ? divisor : 1, false);
  }

  // 2. All-reduce of this rank's part with the same local rank of every other host.
  {
    const auto* source = local_count > 1
                             ? mine
                             : static_cast<const std::byte*>(call.in) + parts.offset(local) * elem;
    RingPosition ring{host_count, host, nullptr, nullptr};
    if (host_count > 1) {
      ring.next = &engine.connection(hosts[positive_mod(host + 1, host_count)][local]);
      ring.prev = &engine.connection(hosts[positive_mod(host - 1, host_count)][local]);
    }
    const double part_bytes = static_cast<double>(parts.length(local) * elem);
    engine.set_slice_bytes(pipeline_slice(links, links.remote, part_bytes / std::max(1, host_count),
                                          2 * (host_count - 1)));
    ring_all_reduce_pass(engine, ring, source, mine, parts.length(local), call.dtype,
                         host_count > 1 ? divisor : 1);
  }

  // 3. All-gather inside the host: every part travels once around the host's ring.
  if (local_count > 1) {
    engine.set_slice_bytes(
        pipeline_slice(links, links.local, bytes / local_count, local_count - 1));
    RingPasses passes(engine, local_ring, parts, call.dtype);
    for (std::size_t round = 0; round < passes.rounds(); ++round)
      passes.all_gather_round(round, call.out, false);
  }
}

}  // namespace loom::algorithms
