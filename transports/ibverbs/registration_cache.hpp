// Memory registrations keyed by address range. Registering pins pages and programs the HCA's
// translation tables, which costs far more than a lookup, so a range registered once serves
// every later request inside it. Ranges are widened to whole pages; entries in use are never
// evicted; the least recently used idle entry goes when the cache is full.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace loom::transport::ibverbs {

struct Registration {
  void* handle = nullptr;  // the ibv_mr
  std::uint32_t lkey = 0, rkey = 0;
  std::uintptr_t begin = 0, end = 0;  // the registered range [begin, end)
};

class RegistrationCache {
 public:
  // register_range(addr, bytes) registers exactly that range or throws; deregister undoes one.
  using Register = std::function<Registration(void* addr, std::size_t bytes)>;
  using Deregister = std::function<void(const Registration&)>;
  RegistrationCache(Register register_range, Deregister deregister, std::size_t max_entries,
                    std::size_t page = 4096);
  ~RegistrationCache();
  RegistrationCache(const RegistrationCache&) = delete;
  RegistrationCache& operator=(const RegistrationCache&) = delete;

  // A registration covering [addr, addr + bytes), held until release().
  Registration acquire(const void* addr, std::size_t bytes);
  void release(const Registration& registration);
  // Drops the idle registrations that overlap the range (memory about to be freed). Raises
  // std::logic_error if one of them is still held.
  void invalidate(const void* addr, std::size_t bytes);

  std::size_t entries() const { return entries_.size(); }
  std::uint64_t hits() const { return hits_; }
  std::uint64_t misses() const { return misses_; }

 private:
  struct Entry {
    Registration registration;
    int holders = 0;
    std::uint64_t last_use = 0;
  };
  void evict_if_full();

  Register register_;
  Deregister deregister_;
  std::size_t max_entries_;
  std::size_t page_;
  std::vector<Entry> entries_;  // few: a connection registers two ranges
  std::uint64_t clock_ = 0, hits_ = 0, misses_ = 0;
};

}  // namespace loom::transport::ibverbs
