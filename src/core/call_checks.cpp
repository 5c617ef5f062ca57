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
  const auto n = static_cast<std::size_t>(size_);
  // Every byte a call addresses must fit the address space (a quarter of it, for the slots'
  // arithmetic): count for the whole-buffer calls, size() blocks of it for the others.
  const std::size_t limit = (SIZE_MAX / 4) / elem;
  const bool blocks = c.kind == Kind::all_gather || c.kind == Kind::reduce_scatter ||
                      c.kind == Kind::gather || c.kind == Kind::scatter ||
                      c.kind == Kind::all_to_all;
  if (c.count > limit / (blocks ? n : 1))
    throw bad(fmt::format("count {} x {} bytes{} overflows the address space", c.count, elem,
                          blocks ? fmt::format(" x {} ranks", size_) : ""));
  if (c.layout) validate_layout(c, bad);
  const bool rooted = c.kind == Kind::broadcast || c.kind == Kind::reduce ||
                      c.kind == Kind::gather || c.kind == Kind::scatter;
  const bool p2p = algorithms::is_point_to_point(c.kind);
  if ((rooted || p2p) && (c.root < 0 || c.root >= size_))
    throw bad(fmt::format("{} {} is outside [0, {})", p2p ? "peer" : "root", c.root, size_));
  if (p2p && c.root == rank_) throw bad(fmt::format("peer {} is this rank itself", c.root));
  if ((c.kind == Kind::all_to_all || c.kind == Kind::all_to_all_v) && c.in != nullptr &&
      c.in == c.out)
    throw bad("'in' and 'out' are the same buffer: all-to-all is not in place");
  if (c.kind != Kind::barrier) {
    if (reads(c) && c.in == nullptr)
      throw bad(
          fmt::format("argument 'in' is null with {} elements to send", bytes_read(c) / elem));
    if (writes(c) && c.out == nullptr)
      throw bad(fmt::format("argument 'out' is null with {} elements to receive",
                            bytes_written(c) / elem));
  }
}

// The uneven calls' counts and displacements: one per rank, and every block addressable.
template <typename Bad>
void Communicator::Impl::validate_layout(const Collective& c, const Bad& bad) const {
  const algorithms::Layout& l = *c.layout;
  const auto n = static_cast<std::size_t>(size_);
  const std::size_t limit = (SIZE_MAX / 4) / size_of(c.dtype);
  auto check = [&](const std::vector<std::size_t>& counts, const std::vector<std::size_t>& displs,
                   const char* what) {
    if (counts.size() != n || displs.size() != n)
      throw bad(fmt::format("{}counts and {}displs need {} entries (one per rank), not {} and {}",
                            what, what, size_, counts.size(), displs.size()));
    std::size_t sum = 0;  // the whole of an all_gather_v's output, a reduce_scatter_v's input
    for (std::size_t r = 0; r < n; ++r) {
      if (counts[r] > limit || displs[r] > limit - counts[r])
        throw bad(fmt::format("{}counts[{}] = {} at {}displs[{}] = {} overflows the address space",
                              what, r, counts[r], what, r, displs[r]));
      sum += counts[r];  // each below limit, a quarter of the range: no wrap before the check
      if (sum > limit)
        throw bad(fmt::format(
            "the sum of {}counts (up to [{}]: {} ...) overflows the address space", what, r, sum));
    }
  };
  if (c.kind == Kind::all_to_all_v) check(l.send_counts, l.send_displs, "send_");
  check(l.counts, l.displs, c.kind == Kind::all_to_all_v ? "recv_" : "");
}

// How many bytes of 'in' this rank reads and of 'out' it writes: the root alone reads
// broadcast's and scatter's input, and writes reduce's and gather's output.
std::size_t Communicator::Impl::bytes_read(const Collective& c) const {
  const std::size_t elem = size_of(c.dtype);
  const auto n = static_cast<std::size_t>(size_);
  const bool root = c.root == rank_;
  switch (c.kind) {
    case Kind::recv:
    case Kind::barrier:
      return 0;
    case Kind::broadcast:
      return root ? c.count * elem : 0;
    case Kind::scatter:
      return root ? n * c.count * elem : 0;
    case Kind::reduce_scatter:
    case Kind::all_to_all:
      return n * c.count * elem;
    case Kind::all_to_all_v:
      return c.bytes();
    case Kind::all_gather_v:
      return c.layout->counts[static_cast<std::size_t>(rank_)] * elem;
    default:
      return c.count * elem;
  }
}
std::size_t Communicator::Impl::bytes_written(const Collective& c) const {
  const std::size_t elem = size_of(c.dtype);
  const auto n = static_cast<std::size_t>(size_);
  const bool root = c.root == rank_;
  switch (c.kind) {
    case Kind::send:
    case Kind::barrier:
      return 0;
    case Kind::reduce:
      return root ? c.count * elem : 0;
    case Kind::gather:
      return root ? n * c.count * elem : 0;
    case Kind::all_gather:
    case Kind::all_to_all:
      return n * c.count * elem;
    case Kind::all_to_all_v: {
      std::size_t total = 0;
      for (std::size_t k : c.layout->counts) total += k;
      return total * elem;
    }
    case Kind::reduce_scatter_v:
      return c.layout->counts[static_cast<std::size_t>(rank_)] * elem;
    default:
      return c.count * elem;
  }
}
bool Communicator::Impl::reads(const Collective& c) const {
  return bytes_read(c) > 0;
}
bool Communicator::Impl::writes(const Collective& c) const {
  return bytes_written(c) > 0;
}

// Where the call's buffers are: host memory, or one GPU (then the communicator's GPU runtime
// exists, bound to that device). A stream with host buffers, or buffers on two sides, are
// refused.
void Communicator::Impl::place(Collective& c) {
  const std::string_view op = algorithms::to_string(c.kind);
  auto bad = [&](const std::string& why) {
    return InvalidArgument(fmt::format("{}: rank {}: {}", op, rank_, why));
  };
  if (c.kind == Kind::barrier || (!reads(c) && !writes(c))) return;
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
    gpu_ = gpu::make_runtime(device, rank_, config_.link.slot_bytes(),
                             ipc_ != nullptr && config_.selection.cuda_direct);
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
