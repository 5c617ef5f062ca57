// The algorithms, one per file; the selector (selection.hpp) chooses among them per call.
#pragma once

#include <deque>
#include <functional>
#include <utility>
#include <vector>

#include "algorithms/engine.hpp"

namespace loom::algorithms {

void ring_all_reduce(Engine& engine, const Collective& call);
void hierarchical_all_reduce(Engine& engine, const Collective& call);
void recursive_doubling_all_reduce(Engine& engine, const Collective& call);
void halving_doubling_all_reduce(Engine& engine, const Collective& call);
void one_shot_all_reduce(Engine& engine, const Collective& call);
// One host over shm: each rank reads its block of every peer's input straight out of the peer's
// memory (process_vm_readv) and writes the finished block into every peer's output
// (process_vm_writev).
void single_copy_all_reduce(Engine& engine, const Collective& call);
// Calls the single-copy all-reduce served to the end, in this process (tests check the path).
std::uint64_t single_copy_all_reduce_calls();
void ring_reduce_scatter(Engine& engine, const Collective& call);
void ring_all_gather(Engine& engine, const Collective& call);
void bruck_all_gather(Engine& engine, const Collective& call);
void pipelined_broadcast(Engine& engine, const Collective& call);
void pipelined_reduce(Engine& engine, const Collective& call);
void dissemination_barrier(Engine& engine, const Collective& call);
void point_to_point(Engine& engine, const Collective& call);

// Sends and receives on host buffers progressing side by side: each moves whenever its
// connection allows, those to one peer in one direction in the order they were issued (which
// is how the peer matches them). A receive issued before a send no longer holds the send back,
// so two ranks that each post a receive and then a send to the other (PyTorch's
// batch_isend_irecv) both finish, as Gloo's and NCCL's grouped point-to-point do.
class PointToPointBatch {
 public:
  explicit PointToPointBatch(Engine& engine) : engine_(engine) {}
  // `done` runs once the operation has completed (its buffer is free again).
  void add(const Collective& call, std::function<void()> done);
  // Runs until every operation added is done; between steps `more` may add operations issued
  // meanwhile. On an error, current() is the operation that raised it.
  void run(bool background, const std::function<void()>& more);
  const Collective* current() const { return current_; }

 private:
  struct Op {
    Collective call;
    std::function<void()> done;
    std::size_t slice_bytes = 0;
    std::size_t moved = 0;  // elements
    bool finished = false;
  };
  // Moves every operation that may move; true when any did.
  bool step();

  Engine& engine_;
  // Stable addresses (the engine points at the current call): the open operations and the
  // finished ones before the first open one, which step() drops but for the current.
  std::deque<Op> ops_;
  std::size_t first_open_ = 0;
  const Collective* current_ = nullptr;
  // step()'s lanes held back by an open operation: kept, so waiting steps do not allocate.
  std::vector<std::pair<int, Kind>> blocked_;
};
void pairwise_all_to_all(Engine& engine, const Collective& call);
void single_copy_all_to_all(Engine& engine, const Collective& call);
void linear_gather(Engine& engine, const Collective& call);
void binomial_gather(Engine& engine, const Collective& call);
void linear_scatter(Engine& engine, const Collective& call);
void binomial_scatter(Engine& engine, const Collective& call);
// The buffers of one host's ranks read and written in place (direct.cpp): device buffers through
// the peers' memory (CUDA IPC), host buffers in the communicator's shared windows
// (Communicator::alloc). Where some rank's cannot be shared, the model's best other algorithm
// runs instead.
void direct(Engine& engine, const Collective& call);
// Host calls direct served in place, in this process (tests check the path was taken).
std::uint64_t direct_host_calls();

// The ring all-reduce of `count` elements over any ring; `divisor` divides the sums (avg).
// stream_outputs: the copies into `out` stream past the caches (Primitives::stream_outputs).
void ring_all_reduce_pass(Engine& engine, const RingPosition& ring, const void* in, void* out,
                          std::size_t count, DataType dtype, int divisor,
                          bool stream_outputs = false);

// Elements each rank moves through the ring per step: half the slots, so a rank can post a whole
// chunk before it must receive (a full FIFO would deadlock a ring where every rank sends first).
std::size_t ring_chunk_elems(Engine& engine, transport::Connection& next, DataType dtype);

}  // namespace loom::algorithms
