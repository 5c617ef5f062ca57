#include "buffers.hpp"

#include <cstdint>
#include <cstdlib>

#include "device.hpp"
#include "verify/patterns.hpp"

namespace perf {
namespace {

constexpr std::uintptr_t kPage = 4096;

}  // namespace

Buffers::Buffers(const Args& a, loom::Communicator& comm, std::size_t max_bytes)
    : a_(a), elem_(loom::size_of(a.dtype)) {
  // --page-offset: room to move each buffer to that offset past a page start.
  const std::size_t room = a.page_offset < 0 ? 0 : 2 * kPage;
  host_in_.resize(max_bytes + 64 + room);
  host_out_.resize(max_bytes + 64 + room);
  auto placed = [&](std::vector<char>& v) {
    if (a.page_offset < 0) return v.data();
    const auto page = (reinterpret_cast<std::uintptr_t>(v.data()) + kPage - 1) & ~(kPage - 1);
    return reinterpret_cast<char*>(page) + a.page_offset;
  };
  in_ = placed(host_in_);
  out_ = placed(host_out_);
  if (a.shared) {
    in_ = static_cast<char*>(comm.alloc(max_bytes + 64));
    out_ = static_cast<char*>(comm.alloc(max_bytes + 64));
    description_ = "host memory shared by the host's ranks (Communicator::alloc)";
  }
  if (a.cuda) {
    const char* local = std::getenv("LOCAL_RANK");
    const int device = select_device(local ? std::atoi(local) : comm.rank());
    in_ = static_cast<char*>(device_alloc(max_bytes + 64));
    out_ = static_cast<char*>(device_alloc(max_bytes + 64));
    stream_ = stream_create();
    description_ = "device " + std::to_string(device) + " (" + device_name(device) + ")";
  }
}

void Buffers::sync() const {
  if (a_.cuda) stream_sync(stream_);
}

CheckIo Buffers::check_io() {
  CheckIo io;
  io.fill = [this](char* dst, std::size_t elems, int pattern_rank, std::size_t first) {
    if (!a_.cuda) return loom::verify::fill(dst, elems, pattern_rank, a_.dtype, a_.redop, first);
    loom::verify::fill(host_in_.data(), elems, pattern_rank, a_.dtype, a_.redop, first);
    copy_to_device(dst, host_in_.data(), elems * elem_);
  };
  io.output = [this](const char* src, std::size_t elems) -> const char* {
    if (!a_.cuda) return src;
    stream_sync(stream_);
    copy_to_host(host_out_.data(), src, elems * elem_);
    return host_out_.data();
  };
  return io;
}

void Buffers::release_windows(loom::Communicator& comm) {
  if (!a_.shared) return;
  comm.free(out_);
  comm.free(in_);
}

void Buffers::release_device() {
  if (!a_.cuda) return;
  stream_destroy(stream_);
  device_free(in_);
  device_free(out_);
}

}  // namespace perf
