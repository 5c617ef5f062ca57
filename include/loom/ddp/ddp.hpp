// Data-parallel training on Loom, after PyTorch's DistributedDataParallel: parameters broadcast
// from rank 0 at construction, gradients gathered in buckets (reverse order of the parameters,
// so the first bucket fills first in backward), each bucket all-reduced (averaged)
// asynchronously the moment its last gradient is ready, overlapping the rest of backward.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/ddp/layers.hpp"
#include "loom/loom.hpp"

namespace loom::ddp {

// What travels on the wire: f32, or gradients divided by the world size and rounded to f16 or
// bf16 (half the bytes), summed (in f32 inside each reduction step) and widened back.
enum class CommHook { none, fp16, bf16 };
std::string_view to_string(CommHook hook);

// The same on every rank (else every rank raises InvalidArgument at construction).
struct DdpOptions {
  double bucket_cap_mb = 25.0;   // MiB per bucket...
  double first_bucket_mb = 1.0;  // ...except the first, small so that it starts early
  CommHook comm_hook = CommHook::none;
  // The buckets lie in memory from Communicator::alloc: on one host over shared memory a bucket's
  // all-reduce may then read the peers' buckets where they are instead of streaming through the
  // slots (the cost model chooses per call). That memory is the communicator's until it is gone
  // (alloc and free are collective; destroying this object communicates nothing): each DDP
  // object made on a long-lived communicator adds its buckets' size to it. The buckets and the
  // gradients own that memory (Communicator::alloc_shared): it stays mapped while they need it,
  // should the communicator go first. The gradients move to memory of their own when this
  // object is destroyed.
  bool shared_buckets = true;
};

struct BucketInfo {
  std::vector<std::string> parameters;  // in the order their gradients become ready
  std::size_t elements = 0;
};

class DistributedDataParallel {
 public:
  class Impl;

  // Checks that every rank has the same parameter shapes (InvalidArgument naming the first
  // difference, on every rank), broadcasts rank 0's values, and makes each parameter's
  // gradient a view into its bucket. `module` must outlive this object, and `comm` every call
  // on it but its destruction (the gradients stay valid when the communicator goes first).
  DistributedDataParallel(Module& module, Communicator& comm, DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  Tensor forward(const Tensor& input);
  // The module's backward; buckets start their all-reduce as they fill.
  Tensor backward(const Tensor& grad_output);
  // Waits for every bucket: the gradients are then the average over ranks. Call before the
  // optimizer step. Under no_sync() it only ends the pass (gradients stay local).
  void finalize();

  // While a NoSync lives, backward passes accumulate gradients locally without communication
  // (gradient accumulation); the first synchronised pass after it all-reduces the sum.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    Impl* impl_;
    std::uint64_t generation_;  // the ddp_'s continue_on count when this began
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  // After a failure and Communicator::shrink: abandons the pass in flight (every gradient is
  // zeroed, and its optimizer step must not run) and goes on over `comm`, checking the shapes
  // and broadcasting `comm`'s rank 0 parameters as at construction. Gradients are then averaged
  // over comm.size() ranks. `comm` must outlive every later call on this object; the
  // communicator it leaves may be gone already (`comm = comm.shrink(); ddp.continue_on(comm);`):
  // the buckets own their memory. Should that fail too, every later call raises
  // InvalidArgument until a continue_on succeeds.
  void continue_on(Communicator& comm);

  const std::vector<BucketInfo>& buckets() const;
  Module& module();

 private:
  Impl& impl() const;

  Module& module_;
  DdpOptions options_;
  std::unique_ptr<Impl> impl_;
  std::uint64_t generation_ = 0;  // continue_on calls so far
};

}  // namespace loom::ddp
