// The "loom" backend of torch.distributed: each collective becomes one call of a
// loom::Communicator, queued in issue order on the group's Executor. With PyTorch 2.15 the
// Backend API maps onto Loom's own features: split() onto Communicator::split, shrink() onto
// Communicator::shrink, abort() and shutdown() onto abort() and destroy(), coalescing onto one
// batch of Loom calls, allocateTensor() onto the communicator's shared windows.
#pragma once

#include <loom/loom.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "executor.hpp"
#include "group_health.hpp"
#include "options.hpp"
#include "tensors.hpp"
#include "torch_compat.hpp"
#include "window_pool.hpp"

namespace loom_torch {

class ProcessGroupLoom : public BackendBase {
 public:
  // Joins the group through `store` (PyTorch's, for this group) with PyTorch's timeout as
  // Loom's; every other setting comes from `options` where set, else the LOOM_* environment.
  ProcessGroupLoom(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   std::chrono::milliseconds timeout, const loom::Options& options);
  // A group over a communicator made already (a split or a shrink of another group's).
  ProcessGroupLoom(std::shared_ptr<loom::Communicator> comm, std::chrono::milliseconds timeout);
  ~ProcessGroupLoom() override;

  const std::string getBackendName() const override { return "loom"; }
  std::string describe() const;

  // Every member creates the group at the same point of its program: all start from 0, and each
  // issues the same collectives in the same order.
  void setSequenceNumberForGroup() override { sequence_ = 0; }
  uint64_t getSequenceNumberForGroup() override { return sequence_; }

  // Rank 0 hears from every other rank within the timeout, then answers each, as
  // ProcessGroupGloo's does and in its words ("Rank 1 failed to pass monitoredBarrier in ...").
  // A rank that fails it aborts its group: the group is unusable after, as after any failure.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
#if LOOM_TORCH_AT_LEAST(2, 1)
  // PyTorch's route for sparse tensors (2.1+): as allreduce; a dense tensor is refused.
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override;
#endif
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
#if LOOM_TORCH_AT_LEAST(2, 0)
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
#endif
#if LOOM_TORCH_BACKEND_API
  // The *_single names of PyTorch 2.15 (its older names forward to them and back).
  c10::intrusive_ptr<c10d::Work> all_gather_single(at::Tensor& output, at::Tensor& input,
                                                   const c10d::AllgatherOptions& opts) override {
    return _allgather_base(output, input, opts);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override {
    return _reduce_scatter_base(output, input, opts);
  }
  c10::intrusive_ptr<c10d::Work> all_to_all_single(at::Tensor& output, at::Tensor& input,
                                                   std::vector<int64_t>& output_splits,
                                                   std::vector<int64_t>& input_splits,
                                                   const c10d::AllToAllOptions& opts) override {
    return alltoall_base(output, input, output_splits, input_splits, opts);
  }
  c10::intrusive_ptr<c10d::Work> all_gather_single_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override {
    return allgather_into_tensor_coalesced(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override {
    return reduce_scatter_tensor_coalesced(outputs, inputs, opts);
  }
  // Rank `root` receives every rank's input, one after another, in one flat output.
  c10::intrusive_ptr<c10d::Work> gather_single(at::Tensor& output, at::Tensor& input,
                                               const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather_into_tensor(at::Tensor& output, at::Tensor& input,
                                                    const c10d::GatherOptions& opts) override {
    return gather_single(output, input, opts);
  }

  c10::intrusive_ptr<Options> getBackendOptions() override {
    return options_;
  }
  // The options the group was made with (the communicator has their settings already).
  void set_options(c10::intrusive_ptr<LoomOptions> options) {
    options_ = std::move(options);
  }
  bool supportsSplitting() const override {
    return true;
  }
  bool supportsShrinking() const override {
    return true;
  }
  bool supportsCoalescing() const override {
    return true;
  }
  // PyTorch passes the device's index alone: the host's device has none (-1), an accelerator's
  // has one, and the windows are host memory.
  bool supportsTensorAlloc(c10::DeviceIndex index) override {
    return index < 0;
  }
  bool supportsAbortHooks() const override {
    return true;
  }

  // Collective over the ranks listed (Loom's create_group): they form a child, ordered as
  // listed, on this group's hosts and settings; a rank not listed gets null at once.
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
  // The ranks not excluded go on (Loom's shrink with an exclude list); SHRINK_ABORT aborts this
  // group first, cutting its running calls short.
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& ranks_to_exclude,
                                           int shrink_flags,
                                           const c10::intrusive_ptr<Options>& opts) override;
  void abort() override;
  void shutdown() override;
  void registerAbortHook(int64_t hook_id, c10d::AbortHook hook) override;
  void unregisterAbortHook(int64_t hook_id) override;
  void setTimeout(std::chrono::milliseconds timeout) override;
  c10d::ErrorType getError() override;
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  std::shared_ptr<c10::Allocator> getMemAllocator() override;
  at::Tensor allocateTensor(long size, at::TensorOptions options) override;
#endif
  // The pool allocateTensor() takes from, made (collectively) on first use.
  std::shared_ptr<WindowPool> pool();
  std::shared_ptr<WindowPool> pool_if_made() {
    std::lock_guard lock(pool_mu_);
    return pool_;
  }

 private:
  using Body = std::function<void(loom::Communicator&, loom::CudaStream)>;
  // Queues `body` as one operation; `device_of` decides the device (and CUDA stream) it runs on.
  c10::intrusive_ptr<c10d::Work> enqueue(const Where& where, c10d::OpType type, const char* title,
                                         const at::Tensor& device_of,
                                         const std::vector<at::Tensor>& inputs,
                                         std::vector<at::Tensor> outputs, Body body);
  // allreduce of a sparse (COO) tensor: ReduceOp.SUM on CPU, as gloo's (sparse.cpp).
  c10::intrusive_ptr<c10d::Work> sparse_allreduce(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts);
  // Queues a LoomWork's operation, or keeps it for the batch while coalescing.
  void submit(const std::shared_ptr<Op>& op);
  // Runs `body` on the communicator in this group's turn (after what was issued before) and
  // waits for it: the group's own collective steps (split, the pool's window).
  void run_in_turn(const std::function<void(loom::Communicator&)>& body);
  // A send or receive on a host tensor, issued to Loom asynchronously in its turn.
  c10::intrusive_ptr<c10d::Work> issue_point_to_point(const Where& where, c10d::OpType type,
                                                      const char* title, const at::Tensor& t,
                                                      bool send, int peer);
  Where where(const char* op, bool at_once = false) const {
    return {op, getRank(), getSize(), at_once};
  }

  std::shared_ptr<loom::Communicator> comm_;
  std::chrono::milliseconds timeout_;  // PyTorch's, for this group
  std::shared_ptr<Executor> executor_;
  std::atomic<uint64_t> sequence_{0};  // collectives issued (point-to-point excluded)
  std::shared_ptr<GroupHealth> health_ = std::make_shared<GroupHealth>();
  std::mutex mu_;  // the batch
  bool coalescing_ = false;
  std::vector<std::shared_ptr<Op>> batch_;  // operations issued while coalescing
  std::mutex pool_mu_;
  std::shared_ptr<WindowPool> pool_;
#if LOOM_TORCH_BACKEND_API
  c10::intrusive_ptr<LoomOptions> options_;
#endif
};

}  // namespace loom_torch
