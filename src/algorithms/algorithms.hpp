// The algorithms, one per file; selection.cpp chooses among them per call.
#pragma once

#include "algorithms/engine.hpp"

namespace loom::algorithms {

void ring_all_reduce(Engine& engine, const Collective& call);
void hierarchical_all_reduce(Engine& engine, const Collective& call);
void recursive_doubling_all_reduce(Engine& engine, const Collective& call);
void one_shot_all_reduce(Engine& engine, const Collective& call);
void ring_reduce_scatter(Engine& engine, const Collective& call);
void ring_all_gather(Engine& engine, const Collective& call);
void pipelined_broadcast(Engine& engine, const Collective& call);
void pipelined_reduce(Engine& engine, const Collective& call);
void dissemination_barrier(Engine& engine, const Collective& call);
void point_to_point(Engine& engine, const Collective& call);
void pairwise_all_to_all(Engine& engine, const Collective& call);
void single_copy_all_to_all(Engine& engine, const Collective& call);
void linear_gather(Engine& engine, const Collective& call);
void binomial_gather(Engine& engine, const Collective& call);
void linear_scatter(Engine& engine, const Collective& call);
void binomial_scatter(Engine& engine, const Collective& call);
// Device buffers of one host's ranks read and written in place (direct.cpp); false, on every
// rank alike, when the call must go through the slots instead.
bool direct_device_call(Engine& engine, const Collective& call);

// The ring all-reduce of `count` elements over any ring; `divisor` divides the sums (avg).
void ring_all_reduce_pass(Engine& engine, const RingPosition& ring, const void* in, void* out,
                          std::size_t count, DataType dtype, int divisor);

// Elements each rank moves through the ring per step: half the slots, so a rank can post a whole
// chunk before it must receive (a full FIFO would deadlock a ring where every rank sends first).
std::size_t ring_chunk_elems(Engine& engine, transport::Connection& next, DataType dtype);

}  // namespace loom::algorithms
