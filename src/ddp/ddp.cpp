#include "loom/ddp/ddp.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include <fmt/format.h>

#include "loom/trace.hpp"
#include "loom/util.hpp"

namespace loom::ddp {

std::string_view to_string(CommHook hook) {
  switch (hook) {
    case CommHook::none:
      return "none";
    case CommHook::fp16:
      return "fp16";
    case CommHook::bf16:
      return "bf16";
  }
  return "?";
}

namespace {

struct Slot {  // a parameter's place in its bucket
  Parameter* param;
  std::size_t offset;
};

struct Bucket {
  std::vector<Slot> slots;
  Tensor flat;        // the gradients, one after another
  Tensor compressed;  // f16/bf16 bits (as floats' storage), with a comm hook
  std::size_t pending = 0;
  bool launched = false;
  Work work;
};

}  // namespace

class DistributedDataParallel::Impl {
 public:
  Impl(Module& module, Communicator& comm, DdpOptions options)
      : module_(module), comm_(comm), options_(options) {
    params_ = module_.parameters();
    check_options_agree();
    check_shapes_agree();
    try {
      assign_buckets();
      broadcast_parameters();
    } catch (...) {  // the buckets made so far go with this object: the gradients must not
      release_gradients();
      throw;
    }
    for (std::size_t b = 0; b < buckets_.size(); ++b)
      for (const Slot& s : buckets_[b].slots) {
        const std::size_t index = static_cast<std::size_t>(
            std::find(params_.begin(), params_.end(), s.param) - params_.begin());
        s.param->on_grad_ready = [this, b, index](Parameter&) { ready(b, index); };
      }
    begin_pass();
  }

  ~Impl() {
    for (Parameter* p : params_) p->on_grad_ready = nullptr;
    for (Bucket& b : buckets_) {
      if (!b.launched) continue;
      try {
        b.work.wait();
      } catch (const Error&) {  // the pass is being abandoned: its error was or will be seen
      }
    }
    release_gradients();
  }

  Tensor backward(const Tensor& grad_output) {
    if (in_flight_)
      throw InvalidArgument(
          "DistributedDataParallel::backward: the previous pass was not finalized (call "
          "finalize() after each synchronised backward)");
    begin_pass();
    trace::Scope span("backward", "compute");
    return module_.backward(grad_output);
  }

  void finalize() {
    if (no_sync_ > 0) return begin_pass();
    // Buckets whose parameters got no gradient this pass go now, in order, on every rank alike.
    while (next_launch_ < buckets_.size()) launch(next_launch_++);
    trace::Scope span("finalize (wait for buckets)", "communication");
    in_flight_ = false;
    for (Bucket& b : buckets_) {
      b.work.wait();
      if (options_.comm_hook != CommHook::none)
        loom::convert(b.compressed.data(), wire_type(), b.flat.data(), DataType::f32,
                      b.flat.numel());
    }
    begin_pass();
  }

  void enter_no_sync() { ++no_sync_; }
  void leave_no_sync() { --no_sync_; }
  const std::vector<BucketInfo>& infos() const { return infos_; }
  Module& module() { return module_; }

 private:
  DataType wire_type() const {
    return options_.comm_hook == CommHook::fp16 ? DataType::f16 : DataType::bf16;
  }

  // The gradients in shared buckets take memory of their own, with their values, so that they
  // do not keep the communicator's window mapped after this object (they could: they own it).
  void release_gradients() {
    if (!options_.shared_buckets || options_.comm_hook != CommHook::none) return;
    for (Bucket& b : buckets_)
      for (const Slot& s : b.slots)
        if (!s.param->grad.empty() && s.param->grad.data() >= b.flat.data() &&
            s.param->grad.data() < b.flat.data() + b.flat.numel())
          s.param->grad = s.param->grad.clone();
  }

  // The options decide the buckets, and so the collective calls that make and reduce them: a
  // rank that differs would hang the others, so every rank raises InvalidArgument instead.
  void check_options_agree() {
    const int n = comm_.size();
    const std::array<std::uint64_t, 4> mine{std::bit_cast<std::uint64_t>(options_.bucket_cap_mb),
                                            std::bit_cast<std::uint64_t>(options_.first_bucket_mb),
                                            static_cast<std::uint64_t>(options_.comm_hook),
                                            options_.shared_buckets ? 1u : 0u};
    std::vector<std::uint64_t> all(mine.size() * static_cast<std::size_t>(n));
    comm_.all_gather(mine.data(), all.data(), mine.size(), DataType::u64);
    constexpr const char* kNames[] = {"bucket_cap_mb", "first_bucket_mb", "comm_hook",
                                      "shared_buckets"};
    for (int r = 1; r < n; ++r)
      for (std::size_t i = 0; i < mine.size(); ++i)
        if (all[static_cast<std::size_t>(r) * mine.size() + i] != all[i])
          throw InvalidArgument(
              fmt::format("DistributedDataParallel: rank {}: DdpOptions::{} differs between rank "
                          "0 and rank {}: every rank must pass the same options",
                          comm_.rank(), kNames[i], r));
  }

  // Every rank learns every rank's parameter count and sizes, so all of them decide alike.
  void check_shapes_agree() {
    const int n = comm_.size();
    std::uint64_t count = params_.size();
    std::vector<std::uint64_t> counts(static_cast<std::size_t>(n));
    comm_.all_gather(&count, counts.data(), 1, DataType::u64);
    for (int r = 0; r < n; ++r)
      if (counts[static_cast<std::size_t>(r)] != count)
        throw InvalidArgument(fmt::format(
            "DistributedDataParallel: rank {}: rank {} has {} parameters, rank {} has {}",
            comm_.rank(), r, counts[static_cast<std::size_t>(r)], comm_.rank(), count));
    constexpr std::size_t kDims = 4;  // rank-4 shapes at most, padded with zeros
    std::vector<std::uint64_t> mine(params_.size() * kDims, 0);
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const auto& shape = params_[i]->value.shape();
      if (shape.size() > kDims)
        throw InvalidArgument(fmt::format("DistributedDataParallel: parameter {} has {} dimensions",
                                          params_[i]->name, shape.size()));
      std::copy(shape.begin(), shape.end(), mine.begin() + static_cast<std::ptrdiff_t>(i * kDims));
    }
    std::vector<std::uint64_t> all(mine.size() * static_cast<std::size_t>(n));
    comm_.all_gather(mine.data(), all.data(), mine.size(), DataType::u64);
    auto shape_of = [&](int r, std::size_t i) {
      std::vector<std::uint64_t> s;
      for (std::size_t d = 0; d < kDims; ++d)
        if (auto v = all[static_cast<std::size_t>(r) * mine.size() + i * kDims + d]) s.push_back(v);
      return fmt::format("[{}]", fmt::join(s, ", "));
    };
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < params_.size(); ++i)
        if (shape_of(r, i) != shape_of(0, i))
          throw InvalidArgument(fmt::format(
              "DistributedDataParallel: rank {}: parameter {} ({}) is {} on rank 0 but {} on "
              "rank {}",
              comm_.rank(), i, params_[i]->name, shape_of(0, i), shape_of(r, i), r));
  }

  // Reverse order of the parameters: roughly the order backward produces their gradients.
  void assign_buckets() {
    const double mib = 1024.0 * 1024.0;
    std::vector<std::vector<Parameter*>> groups(1);
    double bytes = 0;
    for (auto it = params_.rbegin(); it != params_.rend(); ++it) {
      groups.back().push_back(*it);
      bytes += static_cast<double>((*it)->value.numel() * sizeof(float));
      const double cap =
          (groups.size() == 1 ? options_.first_bucket_mb : options_.bucket_cap_mb) * mib;
      if (bytes >= cap && std::next(it) != params_.rend()) groups.emplace_back(), bytes = 0;
    }
    if (groups.back().empty()) groups.pop_back();
    for (auto& group : groups) {
      Bucket b;
      BucketInfo info;
      for (Parameter* p : group) {
        b.slots.push_back(Slot{p, info.elements});
        info.parameters.push_back(p->name);
        info.elements += p->value.numel();
      }
      // The buffer the all-reduce runs on goes where peers on this host may read it in place.
      const bool hooked = options_.comm_hook != CommHook::none;
      b.flat = hooked ? Tensor({info.elements}) : bucket_tensor(info.elements);
      if (hooked) b.compressed = bucket_tensor((info.elements + 1) / 2);
      for (const Slot& s : b.slots) {
        Tensor view = b.flat.view_of(s.offset, s.param->value.shape());
        if (!s.param->grad.empty()) view.assign(s.param->grad);
        s.param->grad = view;
      }
      buckets_.push_back(std::move(b));
      infos_.push_back(std::move(info));
    }
  }

  // Zeroed floats, in memory from alloc_shared() with shared_buckets (collective: every rank
  // makes the same buckets in the same order). The bucket and every gradient viewing it own
  // that memory: it stays mapped while any of them lives, whichever of the communicator, this
  // object and the gradients goes first. A rank that cannot make its window takes memory of its
  // own; its peers learnt so in the same alloc, and calls on the bucket go through the slots.
  Tensor bucket_tensor(std::size_t elements) {
    if (!options_.shared_buckets) return Tensor({elements});
    std::shared_ptr<void> memory;
    try {
      memory = comm_.alloc_shared(elements * sizeof(float));
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::internal) throw;  // the communicator's failure, not the memory's
      return Tensor({elements});
    }
    float* data = static_cast<float*>(memory.get());
    return Tensor::view(std::move(memory), data, {elements});
  }

  // Rank 0's values, a bucket at a time through the bucket's buffer.
  void broadcast_parameters() {
    for (Bucket& b : buckets_) {
      Tensor staging = b.flat.clone();  // keeps the gradients while the buffer carries values
      for (const Slot& s : b.slots)
        std::memcpy(b.flat.data() + s.offset, s.param->value.data(), s.param->value.numel() * 4);
      comm_.broadcast(b.flat.data(), b.flat.numel(), DataType::f32, 0);
      for (const Slot& s : b.slots)
        std::memcpy(s.param->value.data(), b.flat.data() + s.offset, s.param->value.numel() * 4);
      b.flat.assign(staging);
    }
  }

  void begin_pass() {
    for (Bucket& b : buckets_) {
      b.pending = b.slots.size();
      b.launched = false;
    }
    seen_.assign(params_.size(), false);
    next_launch_ = 0;
  }

  void ready(std::size_t bucket, std::size_t param) {
    if (seen_[param]) return;  // a parameter used twice counts once
    seen_[param] = true;
    if (--buckets_[bucket].pending > 0 || no_sync_ > 0) return;
    // Buckets start in index order on every rank, whatever order they fill in.
    while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0)
      launch(next_launch_++);
  }

  void launch(std::size_t index) {
    Bucket& b = buckets_[index];
    b.launched = true;
    in_flight_ = true;
    if (trace::enabled())  // marks which collective is which bucket in the trace
      trace::Scope span(fmt::format("bucket {} launched ({} parameters)", index, b.slots.size()),
                        "communication");
    const std::size_t n = b.flat.numel();
    if (options_.comm_hook == CommHook::none) {
      b.work =
          comm_.all_reduce_async(b.flat.data(), b.flat.data(), n, DataType::f32, ReduceOp::avg);
      return;
    }
    {
      trace::Scope span(fmt::format("compress bucket {}", index), "communication");
      loom::convert(b.flat.data(), DataType::f32, b.compressed.data(), wire_type(), n,
                    1.0f / static_cast<float>(comm_.size()));
    }
    b.work = comm_.all_reduce_async(b.compressed.data(), b.compressed.data(), n, wire_type(),
                                    ReduceOp::sum);
  }

  Module& module_;
  Communicator& comm_;
  DdpOptions options_;
  std::vector<Parameter*> params_;
  std::vector<Bucket> buckets_;
  std::vector<BucketInfo> infos_;
  std::vector<bool> seen_;
  std::size_t next_launch_ = 0;
  int no_sync_ = 0;
  bool in_flight_ = false;  // launched buckets not yet waited for by finalize()
};

DistributedDataParallel::DistributedDataParallel(Module& module, Communicator& comm,
                                                 DdpOptions options)
    : module_(module), options_(options), impl_(std::make_unique<Impl>(module, comm, options)) {}
DistributedDataParallel::~DistributedDataParallel() = default;

DistributedDataParallel::Impl& DistributedDataParallel::impl() const {
  if (!impl_)
    throw InvalidArgument(
        "DistributedDataParallel: no communicator (continue_on failed; call it again with a "
        "working one)");
  return *impl_;
}

void DistributedDataParallel::continue_on(Communicator& comm) {
  ++generation_;
  impl_.reset();  // waits out the abandoned buckets, which fail at once on a failed communicator
  for (Parameter* p : module_.parameters())
    if (!p->grad.empty()) p->grad.zero();
  impl_ = std::make_unique<Impl>(module_, comm, options_);
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  return impl().module().forward(input);
}
Tensor DistributedDataParallel::backward(const Tensor& grad_output) {
  return impl().backward(grad_output);
}
void DistributedDataParallel::finalize() {
  impl().finalize();
}
const std::vector<BucketInfo>& DistributedDataParallel::buckets() const {
  return impl().infos();
}
Module& DistributedDataParallel::module() {
  return module_;
}
DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp)
    : ddp_(ddp), impl_(&ddp.impl()), generation_(ddp.generation_) {
  impl_->enter_no_sync();
}
DistributedDataParallel::NoSync::~NoSync() {
  // Not after continue_on replaced it (a new Impl may lie at the old one's address).
  if (ddp_.generation_ == generation_) impl_->leave_no_sync();
}

}  // namespace loom::ddp
