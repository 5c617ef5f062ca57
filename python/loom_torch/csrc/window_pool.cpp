#include "window_pool.hpp"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace loom_torch {

namespace {

constexpr std::size_t kAlign = 64;  // a cache line: blocks never share one
constexpr std::size_t kDefaultBytes = std::size_t{1} << 30;

std::size_t aligned(std::size_t bytes) {
  return (std::max<std::size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
}

}  // namespace

struct WindowPool::Block {
  std::shared_ptr<WindowPool> pool;
  std::size_t offset;
  std::size_t bytes;
};

std::size_t WindowPool::configured_bytes() {
  const char* text = std::getenv("LOOM_TORCH_POOL_BYTES");
  if (text == nullptr || *text == '\0') return kDefaultBytes;
  std::size_t used = 0;
  unsigned long long value = 0;
  try {
    value = std::stoull(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = std::string(text + used);
  const std::size_t scale = unit.empty()  ? 1
                            : unit == "K" ? std::size_t{1} << 10
                            : unit == "M" ? std::size_t{1} << 20
                            : unit == "G" ? std::size_t{1} << 30
                                          : 0;
  if (used == 0 || scale == 0 || value == 0)
    throw loom::InvalidArgument("LOOM_TORCH_POOL_BYTES=" + std::string(text) +
                                ": give a positive number of bytes, with K, M or G if you like");
  return static_cast<std::size_t>(value) * scale;
}

WindowPool::WindowPool(std::shared_ptr<loom::Communicator> comm, std::size_t bytes, Make make)
    : comm_(std::move(comm)), capacity_(aligned(bytes)) {
  base_ = static_cast<char*>(make(capacity_));
  free_.emplace(0, capacity_);
}

// The window itself goes with the communicator (its last holder may be this pool).
WindowPool::~WindowPool() = default;

c10::DataPtr WindowPool::allocate(std::size_t bytes) {
  const c10::Device cpu(c10::DeviceType::CPU);
  const std::size_t want = aligned(bytes);
  {
    std::lock_guard lock(mu_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < want) continue;
      const std::size_t offset = it->first, room = it->second;
      free_.erase(it);
      if (room > want) free_.emplace(offset + want, room - want);
      used_ += want;
      auto* block = new Block{shared_from_this(), offset, want};
      return c10::DataPtr(base_ + offset, block, &WindowPool::release, cpu);
    }
    if (!warned_full_) {
      warned_full_ = true;
      TORCH_WARN("loom_torch: the process group's shared window (", capacity_,
                 " bytes, LOOM_TORCH_POOL_BYTES) is full: tensors it cannot place come from "
                 "ordinary memory, and calls on them stream through the slots");
    }
  }
  return c10::GetCPUAllocator()->allocate(bytes);
}

void WindowPool::release(void* context) {
  auto* block = static_cast<Block*>(context);
  block->pool->give_back(block->offset, block->bytes);
  delete block;  // may drop the last reference to the pool
}

void WindowPool::give_back(std::size_t offset, std::size_t bytes) {
  std::lock_guard lock(mu_);
  used_ -= bytes;
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + bytes == next->first) {
    bytes += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto before = std::prev(next);
    if (before->first + before->second == offset) {
      before->second += bytes;
      return;
    }
  }
  free_.emplace(offset, bytes);
}

bool WindowPool::holds(const void* p) const {
  const auto* c = static_cast<const char*>(p);
  return c >= base_ && c < base_ + capacity_;
}

std::size_t WindowPool::in_use() const {
  std::lock_guard lock(mu_);
  return used_;
}

}  // namespace loom_torch
