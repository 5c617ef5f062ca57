// A call's arguments and where its buffers are, checked before anything is queued: what is
// refused here raises InvalidArgument and leaves the communicator as it was.
#include <algorithm>

#include <fmt/format.h>

#include "core/communicator_impl.hpp"
#include "device/device.hpp"

namespace loom {

using algorithms::Collective;
using algorithms::Kind;

void Communicator::Impl::validate(const Collective& c) const {
  const std::string_view op = algorithms::to_string(c.kind);
  auto bad = [&](const std::string& why) {
    return InvalidArgument(fmt::format("{}: rank {}: {}", op, rank_, why));
  };
  if (size_of(c.dtype) == 0)
    throw bad(fmt::format("unknown data type {}", static_cast<int>(c.dtype)));
  if (static_cast<int>(c.op) > static_cast<int>(ReduceOp::avg))
    throw bad(fmt::format("unknown reduce op {}", static_cast<int>(c.op)));
  const std::size_t elem = size_of(c.dtype);
  const std::size_t blocks =
      (c.kind == Kind::all_gather || c.kind == Kind::reduce_scatter) ? size_ : 1;
  if (c.count > (SIZE_MAX / 4) / elem / blocks)
    throw bad(fmt::format("count {} x {} bytes{} overflows the address space", c.count, elem,
                          blocks > 1 ? fmt::format(" x {} ranks", blocks) : ""));
  const bool rooted = c.kind == Kind::broadcast || c.kind == Kind::reduce;
  const bool p2p = c.kind == Kind::send || c.kind == Kind::recv;
  if ((rooted || p2p) && (c.root < 0 || c.root >= size_))
    throw bad(fmt::format("{} {} is outside [0, {})", p2p ? "peer" : "root", c.root, size_));
  if (p2p && c.root == rank_) throw bad(fmt::format("peer {} is this rank itself", c.root));
  if (c.count > 0 && c.kind != Kind::barrier) {
    if (reads(c) && c.in == nullptr)
      throw bad(fmt::format("argument 'in' is null with count {} > 0", c.count));
    if (writes(c) && c.out == nullptr)
      throw bad(fmt::format("argument 'out' is null with count {} > 0", c.count));
  }
}

// What this rank actually reads and writes: the root alone reads broadcast's input and writes
// reduce's output.
bool Communicator::Impl::reads(const Collective& c) const {
  return c.kind != Kind::recv && !(c.kind == Kind::broadcast && c.root != rank_);
}
bool Communicator::Impl::writes(const Collective& c) const {
  return c.kind != Kind::send && !(c.kind == Kind::reduce && c.root != rank_);
}

// Where the call's buffers are: host memory, or one GPU (then the communicator's GPU runtime
// exists, bound to that device). A stream with host buffers, or buffers on two sides, are
// refused.
void Communicator::Impl::place(Collective& c) {
  const std::string_view op = algorithms::to_string(c.kind);
  auto bad = [&](const std::string& why) {
    return InvalidArgument(fmt::format("{}: rank {}: {}", op, rank_, why));
  };
  if (c.count == 0 || c.kind == Kind::barrier) return;
  // -2: a buffer this rank does not touch; without GPUs every buffer is host memory (-1).
  auto where = [&](bool used, const void* p) { return !used ? -2 : gpus_ ? device::of(p) : -1; };
  const int in_device = where(reads(c), c.in);
  const int out_device = where(writes(c), c.out);
  if (in_device != -2 && out_device != -2 && in_device != out_device)
    throw bad(
        fmt::format("'in' is {} but 'out' is {}: one call's buffers must be on one side",
                    in_device < 0 ? "host memory" : fmt::format("on device {}", in_device),
                    out_device < 0 ? "host memory" : fmt::format("on device {}", out_device)));
  const int device = std::max(in_device, out_device);
  if (device < 0) {
    if (c.stream != nullptr)
      throw bad(!device::built() ? "a CUDA stream was given but this build has no CUDA support"
                : !gpus_         ? "a CUDA stream was given but no GPU is visible"
                                 : "a CUDA stream was given but the buffers are host memory");
    return;
  }
  std::lock_guard lock(gpu_mu_);
  if (!gpu_) {
    gpu_ = gpu::make_runtime(device, rank_, config_, ipc_ != nullptr);
    if (ipc_) ipc_->prepare(device);
  } else if (gpu_->device() != device) {
    throw bad(
        fmt::format("the buffers are on device {}, but this communicator's device calls "
                    "use device {} (one device per communicator)",
                    device, gpu_->device()));
  }
  c.device = device;
}

}  // namespace loom
