#include "core/device_calls.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "device/device.hpp"
#include "loom/loom.hpp"

namespace loom::core {

DeviceCalls::DeviceCalls(int rank) : rank_(rank), gpus_(device::count() > 0) {}

void DeviceCalls::configure(transport::cudaipc::IpcTransport* ipc, bool direct,
                            std::size_t slot_bytes) {
  ipc_ = ipc;
  direct_ = direct;
  slot_bytes_ = slot_bytes;
}

void DeviceCalls::place(algorithms::Collective& c, bool in_used, bool out_used) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument(
        fmt::format("{}: rank {}: {}", algorithms::to_string(c.kind), rank_, why));
  };
  if (c.kind == algorithms::Kind::barrier || (!in_used && !out_used)) return;
  // -2: a buffer this rank does not touch.
  auto where = [&](bool used, const void* p) { return !used ? -2 : gpus_ ? device::of(p) : -1; };
  const int in_device = where(in_used, c.in);
  const int out_device = where(out_used, c.out);
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
  std::lock_guard lock(mu_);
  if (!runtime_) {
    runtime_ = gpu::make_runtime(device, rank_, slot_bytes_, peers_mapped());
    if (ipc_) ipc_->prepare(device);
  } else if (runtime_->device() != device) {
    throw bad(
        fmt::format("the buffers are on device {}, but this communicator's device calls "
                    "use device {} (one device per communicator)",
                    device, runtime_->device()));
  }
  c.device = device;
}

void DeviceCalls::close() {
  std::lock_guard lock(mu_);
  runtime_.reset();
}

}  // namespace loom::core
