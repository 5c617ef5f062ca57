// torch.distributed's Work for one queued operation: wait() runs it on the waiting thread when
// it is next in line, and its future (DDP's communication hooks) completes when it finishes.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <memory>
#include <string>
#include <vector>

#include "executor.hpp"
#include "tensors.hpp"

namespace loom_torch {

class LoomWork : public c10d::Work {
 public:
  // `title` ("loom:all_reduce") must be a literal: the profiler keeps the pointer. `outputs` are
  // the future's value; `devices` the CUDA devices they are on, if any.
  LoomWork(int rank, c10d::OpType type, const char* title, const std::vector<at::Tensor>& inputs,
           std::vector<at::Tensor> outputs, std::vector<c10::Device> devices,
           std::shared_ptr<Executor> executor, const Where& where);

  // The operation to queue: its body still to be set.
  const std::shared_ptr<Op>& op() const { return op_; }

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override {}
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  std::shared_ptr<Op> op_ = std::make_shared<Op>();
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::shared_ptr<Executor> executor_;
  Where where_;  // names the call in a timeout (formatted only then)
};

}  // namespace loom_torch
