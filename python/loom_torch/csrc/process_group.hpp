// The "loom" backend of torch.distributed: each collective becomes one call of a
// loom::Communicator, queued in issue order on the group's Executor.
#pragma once

#include <loom/loom.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "executor.hpp"
#include "tensors.hpp"
#include "torch_compat.hpp"

namespace loom_torch {

class ProcessGroupLoom : public BackendBase {
 public:
  // Joins the group through `store` (PyTorch's, for this group) with PyTorch's timeout as
  // Loom's; every other setting comes from the LOOM_* environment.
  ProcessGroupLoom(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   std::chrono::milliseconds timeout);
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

 private:
  using Body = std::function<void(loom::Communicator&, loom::CudaStream)>;
  // Queues `body` as one operation; `device_of` decides the device (and CUDA stream) it runs on.
  c10::intrusive_ptr<c10d::Work> enqueue(const Where& where, c10d::OpType type, const char* title,
                                         const at::Tensor& device_of,
                                         const std::vector<at::Tensor>& inputs,
                                         std::vector<at::Tensor> outputs, Body body);
  // A send or receive on a host tensor, issued to Loom asynchronously in its turn.
  c10::intrusive_ptr<c10d::Work> issue_point_to_point(const Where& where, c10d::OpType type,
                                                      const char* title, const at::Tensor& t,
                                                      bool send, int peer);
  Where where(const char* op) const {
    return {op, getRank(), getSize()};
  }

  std::shared_ptr<loom::Communicator> comm_;
  std::chrono::milliseconds timeout_;  // PyTorch's, for this group
  std::shared_ptr<Executor> executor_;
  std::atomic<uint64_t> sequence_{0};  // collectives issued (point-to-point excluded)
};

}  // namespace loom_torch
