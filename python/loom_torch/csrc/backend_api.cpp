// PyTorch 2.15's Backend API on the loom backend, each mapped onto Loom's own feature: split()
// onto Communicator::split, shrink() onto Communicator::shrink with an exclude list, abort() and
// shutdown() onto abort() and destroy(), setTimeout() onto set_timeout(), coalescing onto one
// batch of Loom calls, allocateTensor() onto the communicator's shared windows.
#include "process_group.hpp"

#if LOOM_TORCH_BACKEND_API

#include <algorithm>
#include <string>
#include <vector>

#include "gil.hpp"
#include "work.hpp"

namespace loom_torch {

namespace {

constexpr int kShrinkAbort = 0x01;  // torch.distributed.SHRINK_ABORT

// The child's settings: the options PyTorch hands a split (a copy of the parent's, or the
// caller's pg_options) where they are loom's, else the timeout alone.
loom::Options child_settings(const c10::intrusive_ptr<c10d::Backend::Options>& opts) {
  loom::Options settings;
  if (!opts) return settings;
  if (const auto* loom = dynamic_cast<const LoomOptions*>(opts.get())) settings = loom->loom();
  settings.transport.reset();  // a child keeps its parent's transport (Communicator::split)
  settings.timeout = opts->timeout;
  return settings;
}

// Whether a child takes pg_options' settings (a split, create_group's child) or only their
// timeout (a shrink: Communicator::shrink takes a timeout alone).
enum class ChildSettings { laid_over, timeout_only };

// A child group's options: a copy of ours, with what `opts` (the caller's pg_options, or the
// timeout new_group was given) sets laid over it (a shrunk group: its timeout alone, warning of
// the settings it does not apply); its own object, since PyTorch writes the group's name and
// ranks on it.
c10::intrusive_ptr<LoomOptions> options_for_child(
    const c10::intrusive_ptr<c10d::Backend::Options>& opts, const LoomOptions& mine,
    ChildSettings which) {
  auto options = c10::make_intrusive<LoomOptions>(mine);
  if (!opts) return options;
  options->timeout = opts->timeout;
  if (!opts->group_name.empty()) options->group_name = opts->group_name;
  const auto* loom = dynamic_cast<const LoomOptions*>(opts.get());
  if (!loom) return options;
  if (which == ChildSettings::laid_over) {
    if (loom->algorithm) options->algorithm = loom->algorithm;
    if (loom->buffer_bytes) options->buffer_bytes = loom->buffer_bytes;
    if (loom->slots) options->slots = loom->slots;
    if (loom->sockets_per_peer) options->sockets_per_peer = loom->sockets_per_peer;
    return options;
  }
  std::vector<std::string> ignored;
  if (loom->algorithm && loom->algorithm != mine.algorithm) ignored.emplace_back("algorithm");
  if (loom->buffer_bytes && loom->buffer_bytes != mine.buffer_bytes)
    ignored.emplace_back("buffer_bytes");
  if (loom->slots && loom->slots != mine.slots) ignored.emplace_back("slots");
  if (loom->sockets_per_peer && loom->sockets_per_peer != mine.sockets_per_peer)
    ignored.emplace_back("sockets_per_peer");
  if (loom->transport && loom->transport != mine.transport) ignored.emplace_back("transport");
  if (!ignored.empty())
    TORCH_WARN(
        "loom: shrink_group keeps the group's own settings and applies only the timeout "
        "of pg_options, which also sets: ",
        c10::Join(", ", ignored));
  return options;
}

}  // namespace

loom::Options LoomOptions::loom() const {
  loom::Options o;
  o.timeout = timeout;
  o.algorithm = algorithm;
  o.buffer_bytes = buffer_bytes;
  o.slots = slots;
  o.sockets_per_peer = sockets_per_peer;
  o.transport = transport;
  return o;
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupLoom::split(const c10::intrusive_ptr<c10d::Store>&,
                                                          const std::vector<int>& ranks,
                                                          const c10::intrusive_ptr<Options>& opts) {
  const Where w = where("split");
  // The members alone make the child (PyTorch calls a rank that is not listed once for each
  // device type: it takes no part, as in ProcessGroupGloo's split).
  if (std::find(ranks.begin(), ranks.end(), w.rank) == ranks.end()) return nullptr;
  const loom::Options settings = child_settings(opts);
  std::optional<loom::Communicator> child;
  without_gil([&] { child.emplace(comm_->create_group(ranks, settings)); });
  auto group = c10::make_intrusive<ProcessGroupLoom>(
      std::make_shared<loom::Communicator>(std::move(*child)), settings.timeout.value_or(timeout_));
  group->options_ = options_for_child(opts, *options_, ChildSettings::laid_over);
  std::vector<uint64_t> globals;
  for (int r : ranks)
    globals.push_back(options_->global_ranks_in_group.empty()
                          ? static_cast<uint64_t>(r)
                          : options_->global_ranks_in_group[static_cast<std::size_t>(r)]);
  group->options_->global_ranks_in_group = std::move(globals);
  return group;
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupLoom::shrink(
    const std::vector<int64_t>& ranks_to_exclude, int shrink_flags,
    const c10::intrusive_ptr<Options>& opts) {
  const Where w = where("shrink");
  std::vector<int> exclude;
  for (int64_t r : ranks_to_exclude) {
    if (r < 0 || r >= w.size)
      refuse(w, "rank " + std::to_string(r) + " is outside [0, " + std::to_string(w.size) + ")");
    exclude.push_back(static_cast<int>(r));
  }
  if (shrink_flags & kShrinkAbort) abort();
  const std::chrono::milliseconds timeout = opts ? opts->timeout : timeout_;
  std::optional<loom::Communicator> shrunk;
  without_gil([&] { shrunk.emplace(comm_->shrink(exclude, timeout)); });
  auto group = c10::make_intrusive<ProcessGroupLoom>(
      std::make_shared<loom::Communicator>(std::move(*shrunk)), timeout);
  group->options_ = options_for_child(opts, *options_, ChildSettings::timeout_only);
  std::vector<uint64_t> globals;
  for (int r = 0; r < w.size; ++r)
    if (std::find(exclude.begin(), exclude.end(), r) == exclude.end())
      globals.push_back(options_->global_ranks_in_group.empty()
                            ? static_cast<uint64_t>(r)
                            : options_->global_ranks_in_group[static_cast<std::size_t>(r)]);
  group->options_->global_ranks_in_group = std::move(globals);
  if (opts) group->setTimeout(opts->timeout);
  return group;
}

void ProcessGroupLoom::abort() {
  health_->aborted();
  health_->run_hooks(where("abort").str());
  comm_->abort();  // the running and queued calls end with Aborted; the peers see PeerError
}

void ProcessGroupLoom::shutdown() {
  without_gil([&] {
    // What was issued finishes first (called inside a future's callback on a worker: what runs
    // now; what is queued behind then fails on the destroyed communicator).
    executor_->shutdown();
    comm_->destroy();
  });
}

void ProcessGroupLoom::registerAbortHook(int64_t hook_id, c10d::AbortHook hook) {
  health_->add_hook(hook_id, std::move(hook));
}

void ProcessGroupLoom::unregisterAbortHook(int64_t hook_id) {
  health_->remove_hook(hook_id);
}

void ProcessGroupLoom::setTimeout(std::chrono::milliseconds timeout) {
  comm_->set_timeout(timeout);
  timeout_ = timeout;
  options_->timeout = timeout;
}

c10d::ErrorType ProcessGroupLoom::getError() {
  return static_cast<c10d::ErrorType>(health_->failure());
}

void ProcessGroupLoom::startCoalescing() {
  std::lock_guard lock(mu_);
  if (coalescing_) refuse(where("start_coalescing"), "the group is coalescing already");
  coalescing_ = true;
}

// The batch's operations in one: the sends and receives issued side by side (Loom progresses
// them together), then the collectives in order, then the receives' copies back.
c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::endCoalescing() {
  std::vector<std::shared_ptr<Op>> members;
  {
    std::lock_guard lock(mu_);
    if (!coalescing_) refuse(where("end_coalescing"), "the group is not coalescing");
    coalescing_ = false;
    members.swap(batch_);
  }
  auto work = c10::make_intrusive<LoomWork>(
      getRank(), c10d::OpType::COALESCED, "loom:coalesced", std::vector<at::Tensor>{},
      std::vector<at::Tensor>{}, std::vector<c10::Device>{}, executor_, where("coalesced"));
  const std::shared_ptr<Op>& batch = work->op();
  batch->body = [members] {
    std::vector<std::shared_ptr<Op>> issued;
    for (const auto& m : members)
      if (m->issue) {
        m->issued = m->issue();
        m->issue = nullptr;
        issued.push_back(m);
      }
    std::exception_ptr error;
    try {
      for (const auto& m : members)
        if (std::find(issued.begin(), issued.end(), m) == issued.end() && m->body) m->body();
    } catch (...) {
      error = std::current_exception();
    }
    for (const auto& m : issued) {  // their buffers are Loom's until it is done with them
      try {
        m->issued.wait();
        if (m->body && !error) m->body();
      } catch (...) {
        if (!error) error = std::current_exception();
      }
    }
    for (const auto& m : members) m->body = nullptr, m->issued = loom::Work();
    if (error) std::rethrow_exception(error);
  };
  for (const auto& m : members) m->batch = batch;
  batch->members = std::move(members);
  submit(batch);
  return work;
}

std::shared_ptr<c10::Allocator> ProcessGroupLoom::getMemAllocator() {
  return std::make_shared<WindowAllocator>(
      [self = c10::intrusive_ptr<ProcessGroupLoom>::reclaim_copy(this)] { return self->pool(); });
}

at::Tensor ProcessGroupLoom::allocateTensor(long size, at::TensorOptions options) {
  const Where w = where("allocate_tensor");
  if (size < 0) refuse(w, "size must not be negative, not " + std::to_string(size));
  if (options.device().type() != c10::DeviceType::CPU)
    refuse(w, "the shared windows are host memory: tensors on " + options.device().str() +
                  " are not allocated here");
  const std::size_t bytes = static_cast<std::size_t>(size) * options.dtype().itemsize();
  c10::DataPtr data = pool()->allocate(bytes);
  c10::Storage storage(c10::Storage::use_byte_size_t(), bytes, std::move(data), nullptr, false);
  return at::empty({0}, options).set_(std::move(storage), 0, {size}, {1});
}

}  // namespace loom_torch

#endif
