#include "transports/ibverbs/registration_cache.hpp"

#include <algorithm>
#include <stdexcept>

namespace loom::transport::ibverbs {

RegistrationCache::RegistrationCache(Register register_range, Deregister deregister,
                                     std::size_t max_entries, std::size_t page)
    : register_(std::move(register_range)),
      deregister_(std::move(deregister)),
      max_entries_(std::max<std::size_t>(1, max_entries)),
      page_(page) {}

RegistrationCache::~RegistrationCache() {
  for (const Entry& e : entries_) deregister_(e.registration);
}

Registration RegistrationCache::acquire(const void* addr, std::size_t bytes) {
  const auto begin = reinterpret_cast<std::uintptr_t>(addr);
  const std::uintptr_t end = begin + std::max<std::size_t>(bytes, 1);
  ++clock_;
  for (Entry& e : entries_) {
    if (e.registration.begin <= begin && end <= e.registration.end) {
      ++hits_;
      ++e.holders;
      e.last_use = clock_;
      return e.registration;
    }
  }
  ++misses_;
  evict_if_full();
  const std::uintptr_t first = begin / page_ * page_;
  const std::uintptr_t last = (end + page_ - 1) / page_ * page_;
  Entry e{register_(reinterpret_cast<void*>(first), last - first), 1, clock_};
  e.registration.begin = first;
  e.registration.end = last;
  entries_.push_back(e);
  return e.registration;
}

void RegistrationCache::release(const Registration& registration) {
  for (Entry& e : entries_)
    if (e.registration.handle == registration.handle && e.holders > 0) {
      --e.holders;
      return;
    }
  throw std::logic_error("RegistrationCache::release of a registration not held");
}

void RegistrationCache::invalidate(const void* addr, std::size_t bytes) {
  const auto begin = reinterpret_cast<std::uintptr_t>(addr);
  const std::uintptr_t end = begin + bytes;
  for (const Entry& e : entries_)
    if (e.registration.begin < end && begin < e.registration.end && e.holders > 0)
      throw std::logic_error("RegistrationCache::invalidate of memory still registered for use");
  std::erase_if(entries_, [&](const Entry& e) {
    const bool overlaps = e.registration.begin < end && begin < e.registration.end;
    if (overlaps) deregister_(e.registration);
    return overlaps;
  });
}

void RegistrationCache::evict_if_full() {
  while (entries_.size() >= max_entries_) {
    auto idle = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->holders == 0 && (idle == entries_.end() || it->last_use < idle->last_use)) idle = it;
    if (idle == entries_.end()) return;  // everything is in use: grow beyond the bound
    deregister_(idle->registration);
    entries_.erase(idle);
  }
}

}  // namespace loom::transport::ibverbs
