// The loom backend's life: how a group joins, queues its operations, and ends.
#include "process_group.hpp"

#include <c10/core/StreamGuard.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>

#include "cuda_stream.hpp"
#include "gil.hpp"
#include "stores.hpp"
#include "work.hpp"

namespace loom_torch {

namespace {

using c10d::OpType;

std::string fmt_hex(std::uint32_t word) {
  char text[9];
  std::snprintf(text, sizeof(text), "%08x", word);
  return text;
}

// PyTorch's timeout over the options given; and without a job secret, a random one that the
// ranks agree on through PyTorch's store, so that data connections prove they come from a
// process that can read the store (as the rendezvous itself does).
loom::Options options_for(loom::Store& store, std::chrono::milliseconds timeout,
                          loom::Options options) {
  if (timeout.count() > 0) options.timeout = timeout;
  if (!options.secret && std::getenv("LOOM_SECRET") == nullptr &&
      std::getenv("LOOM_SECRET_FILE") == nullptr) {
    std::random_device random;
    std::string mine;
    for (int i = 0; i < 4; ++i) mine += fmt_hex(random());
    const loom::Bytes agreed =
        store.compare_set("loom_torch/secret", {}, loom::Bytes(mine.begin(), mine.end()));
    options.secret = std::string(agreed.begin(), agreed.end());
  }
  return options;
}

}  // namespace

ProcessGroupLoom::ProcessGroupLoom(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   std::chrono::milliseconds timeout, const loom::Options& options)
    : BackendBase(rank, size), timeout_(timeout) {
  std::shared_ptr<loom::Store> loom_store = loom_store_of(store);
  const loom::Options settings = options_for(*loom_store, timeout, options);
  comm_ = std::make_shared<loom::Communicator>(std::move(loom_store), rank, size, settings);
  executor_ = Executor::start();
#if LOOM_TORCH_BACKEND_API
  options_ = c10::make_intrusive<LoomOptions>(timeout);
#endif
  init();
}

ProcessGroupLoom::ProcessGroupLoom(std::shared_ptr<loom::Communicator> comm,
                                   std::chrono::milliseconds timeout)
    : BackendBase(comm->rank(), comm->size()), comm_(std::move(comm)), timeout_(timeout) {
  executor_ = Executor::start();
#if LOOM_TORCH_BACKEND_API
  options_ = c10::make_intrusive<LoomOptions>(timeout);
#endif
  init();
}

ProcessGroupLoom::~ProcessGroupLoom() {
  // Queued operations finish first (as ProcessGroupGloo's do); a future's Python callback may
  // need the interpreter meanwhile.
  without_gil([&] {
    executor_->shutdown();
    comm_.reset();  // the communicator goes with the last tensor of its windows (pool())
  });
}

std::string ProcessGroupLoom::describe() const {
  return comm_->describe();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::enqueue(
    const Where& where, OpType type, const char* title, const at::Tensor& device_of,
    const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> outputs, Body body) {
  if (type != OpType::SEND && type != OpType::RECV && type != OpType::RECVANYSOURCE) ++sequence_;
  std::optional<c10::Stream> stream = cuda::current_stream(device_of);
  std::vector<c10::Device> devices;
  if (stream) devices.push_back(device_of.device());
  auto work = c10::make_intrusive<LoomWork>(getRank(), type, title, inputs, std::move(outputs),
                                            std::move(devices), executor_, where);
  work->op()->waited_at_once = where.waited_at_once;
  work->op()->body = [comm = comm_, stream, body = std::move(body)] {
    c10::OptionalStreamGuard guard;
    if (stream) guard.reset_stream(*stream);
    body(*comm, cuda::handle(stream));
  };
  submit(work->op());
  return work;
}

void ProcessGroupLoom::submit(const std::shared_ptr<Op>& op) {
  // Failures reach getError() (and the abort hooks) whoever waits for the operation.
  op->on_error = [health = health_, where = where("abort").str()](std::exception_ptr e) {
    if (health->first_failure(e)) health->run_hooks(where);
  };
  {
    std::lock_guard lock(mu_);
    if (coalescing_) {
      op->batched = true;
      batch_.push_back(op);
      return;
    }
  }
  executor_->submit(op);
}

void ProcessGroupLoom::run_in_turn(const std::function<void(loom::Communicator&)>& body) {
  auto op = std::make_shared<Op>();
  op->body = [comm = comm_, &body] { body(*comm); };
  executor_->submit(op);  // never into a coalescing batch: this waits for it at once
  without_gil([&] { executor_->wait(op, std::chrono::milliseconds(0)); });
  if (op->error) std::rethrow_exception(op->error);
}

std::shared_ptr<WindowPool> ProcessGroupLoom::pool() {
  std::lock_guard lock(pool_mu_);
  if (!pool_)
    pool_ = std::make_shared<WindowPool>(comm_, WindowPool::configured_bytes(), [&](std::size_t b) {
      void* p = nullptr;
      run_in_turn([&](loom::Communicator& comm) { p = comm.alloc(b); });
      return p;
    });
  return pool_;
}

}  // namespace loom_torch
