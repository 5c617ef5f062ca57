// Tensors in the communicator's shared windows (Communicator::alloc): every rank of a host maps
// the others' windows, so that a collective whose tensors lie in them reads and writes the peers'
// tensors where they are (Loom's direct path) instead of streaming them through the slots. This
// is what a process group's allocateTensor() and getMemAllocator() hand out (FSDP2's
// set_allocate_memory_from_process_group, torch.distributed's allocate_tensor).
//
// alloc() is collective, and a tensor's memory is taken and given back by one rank alone (its
// deleter runs whenever PyTorch drops the tensor), so the pool makes one window, once, on the
// first allocation (every rank makes its first allocation at the same point of its program, as
// FSDP2 does), and hands out blocks of it. A rank whose window is full serves what it cannot
// place from ordinary memory: calls on such a tensor stream through the slots, as on any other.
#pragma once

#include <loom/loom.hpp>

#include <c10/core/Allocator.h>

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "torch_compat.hpp"

namespace loom_torch {

class WindowPool : public std::enable_shared_from_this<WindowPool> {
 public:
  // The window of `bytes` (LOOM_TORCH_POOL_BYTES, default 1 GiB: its pages are taken as they are
  // first touched); `make` runs comm.alloc() in the process group's turn.
  using Make = std::function<void*(std::size_t bytes)>;
  WindowPool(std::shared_ptr<loom::Communicator> comm, std::size_t bytes, Make make);
  ~WindowPool();
  WindowPool(const WindowPool&) = delete;
  WindowPool& operator=(const WindowPool&) = delete;

  // The window size from LOOM_TORCH_POOL_BYTES (bytes, with an optional K, M or G), or 1 GiB.
  static std::size_t configured_bytes();

  // A DataPtr on the CPU for `bytes`: a block of the window (64-byte aligned) while it has room,
  // else ordinary memory. The block keeps the pool, and with it the communicator and its
  // windows, alive until PyTorch drops it.
  c10::DataPtr allocate(std::size_t bytes);
  // Whether `p` lies in the window (for tests and describe()).
  bool holds(const void* p) const;
  std::size_t capacity() const { return capacity_; }
  std::size_t in_use() const;

 private:
  struct Block;
  static void release(void* context);
  void give_back(std::size_t offset, std::size_t bytes);

  std::shared_ptr<loom::Communicator> comm_;  // owns the window's mapping
  char* base_ = nullptr;
  std::size_t capacity_ = 0;
  mutable std::mutex mu_;                    // deleters run on any thread
  std::map<std::size_t, std::size_t> free_;  // offset -> bytes, merged with their neighbours
  std::size_t used_ = 0;
  bool warned_full_ = false;
};

#if LOOM_TORCH_BACKEND_API
// A c10::Allocator over a process group's pool (Backend::getMemAllocator). The pool is made on
// the first allocate().
class WindowAllocator final : public c10::Allocator {
 public:
  explicit WindowAllocator(std::function<std::shared_ptr<WindowPool>()> pool)
      : pool_(std::move(pool)) {}
  c10::DataPtr allocate(std::size_t bytes) override { return pool_()->allocate(bytes); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  std::function<std::shared_ptr<WindowPool>()> pool_;
};
#endif

}  // namespace loom_torch
