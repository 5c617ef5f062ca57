// loom-perf's buffers: host memory (at --page-offset past a page, if given), the host's shared
// windows (--device shared), or the local GPU's memory with a stream (--device cuda), whose
// contents are staged through the host memory to be filled and checked.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "args.hpp"
#include "check.hpp"
#include "loom/loom.hpp"

namespace perf {

class Buffers {
 public:
  // Room for calls of up to `max_bytes` (--device cuda: where device_unavailable() is empty).
  Buffers(const Args& a, loom::Communicator& comm, std::size_t max_bytes);

  char* in() const { return in_; }
  char* out() const { return out_; }
  loom::CudaStream stream() const { return stream_; }
  // "host memory", "device 0 (...)": where the buffers are, for the header.
  const std::string& description() const { return description_; }
  // Waits for the calls on the stream (none for host buffers).
  void sync() const;
  // Fills and reads the buffers through the host, for --check.
  CheckIo check_io();
  // Frees the shared windows, which the communicator must still exist to free.
  void release_windows(loom::Communicator& comm);
  // Frees the device memory and the stream, once the communicator is gone.
  void release_device();

 private:
  const Args& a_;
  std::size_t elem_;
  // Host buffers, or the staging copies of the device buffers.
  std::vector<char> host_in_, host_out_;
  char* in_ = nullptr;
  char* out_ = nullptr;
  loom::CudaStream stream_ = nullptr;
  std::string description_ = "host memory";
};

}  // namespace perf
