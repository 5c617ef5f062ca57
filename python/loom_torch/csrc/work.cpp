#include "work.hpp"

#include <loom/loom.hpp>

namespace loom_torch {

LoomWork::LoomWork(int rank, c10d::OpType type, const char* title,
                   const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> outputs,
                   std::vector<c10::Device> devices, std::shared_ptr<Executor> executor,
                   const Where& where)
    : c10d::Work(rank, type, title, inputs),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()), std::move(devices))),
      executor_(std::move(executor)),
      where_(where) {
  // The future and the profiler's record end with the operation, whoever holds this Work.
  op_->finish = [future = future_, outputs = outputs_,
                 end = std::move(recordFunctionEndCallback_)](std::exception_ptr error) {
    if (end) end();
    if (error)
      future->setError(error);
    else
      future->markCompleted(c10::IValue(outputs));
  };
}

bool LoomWork::isCompleted() {
  return op_->done.load(std::memory_order_acquire);
}

bool LoomWork::isSuccess() const {
  return op_->done.load(std::memory_order_acquire) && !op_->error;
}

std::exception_ptr LoomWork::exception() const {
  return op_->done.load(std::memory_order_acquire) ? op_->error : nullptr;
}

std::vector<at::Tensor> LoomWork::result() {
  return outputs_;
}

bool LoomWork::wait(std::chrono::milliseconds timeout) {
  if (!executor_->wait(op_, timeout))
    throw loom::TimeoutError(where_.str() + ": wait: the operation did not finish within " +
                             std::to_string(timeout.count()) + " ms");
  if (op_->error) std::rethrow_exception(op_->error);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> LoomWork::getFuture() {
  return future_;
}

}  // namespace loom_torch
