// The algorithms, one per file; selection.cpp chooses among them per call.
#pragma once

#include "algorithms/collective.hpp"

namespace loom::algorithms {

void ring_all_reduce(Engine& engine, const Collective& call);
void recursive_doubling_all_reduce(Engine& engine, const Collective& call);
void one_shot_all_reduce(Engine& engine, const Collective& call);
// The largest buffer recursive doubling may take with these settings.
std::size_t recursive_doubling_max_bytes(const core::Config& config);
void ring_reduce_scatter(Engine& engine, const Collective& call);
void ring_all_gather(Engine& engine, const Collective& call);
void pipelined_broadcast(Engine& engine, const Collective& call);
void pipelined_reduce(Engine& engine, const Collective& call);
void dissemination_barrier(Engine& engine, const Collective& call);
void point_to_point(Engine& engine, const Collective& call);

// Elements each rank moves through the ring per step: half the slots, so a rank can post a whole
// chunk before it must receive (a full FIFO would deadlock a ring where every rank sends first).
std::size_t ring_chunk_elems(Engine& engine, transport::Connection& next, DataType dtype);

}  // namespace loom::algorithms
