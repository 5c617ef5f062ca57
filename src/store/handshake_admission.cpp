#include "store/handshake_admission.hpp"

namespace loom::store {

HandshakeAdmission::Decision HandshakeAdmission::decide(const std::string& source,
                                                        Clock::time_point now) const {
  if (from(source) >= limits_.per_source) return make_room(&source, now);
  if (pending_.size() >= limits_.total) return make_room(nullptr, now);
  return {};
}

// The oldest pending handshake (of `source`, or of anyone) gives way if it is old enough.
HandshakeAdmission::Decision HandshakeAdmission::make_room(const std::string* source,
                                                           Clock::time_point now) const {
  for (const auto& [id, entry] : pending_) {
    if (source != nullptr && entry.source != *source) continue;
    if (now - entry.since < limits_.evictable_after) break;
    return {true, id};
  }
  return {false, std::nullopt};
}

void HandshakeAdmission::add(std::uint64_t id, const std::string& source, Clock::time_point now) {
  pending_.emplace(id, Entry{source, now});
  ++per_source_[source];
}

void HandshakeAdmission::remove(std::uint64_t id) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  auto count = per_source_.find(it->second.source);
  if (--count->second == 0) per_source_.erase(count);
  pending_.erase(it);
}

std::size_t HandshakeAdmission::from(const std::string& source) const {
  auto it = per_source_.find(source);
  return it == per_source_.end() ? 0 : it->second;
}

}  // namespace loom::store
