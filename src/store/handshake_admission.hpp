// Connections that have not authenticated yet are capped, in total and per source address, so
// that strangers cannot use up the store server's descriptors. When a cap is reached, the
// oldest such connection makes room for the newcomer once it has had a fair chance to finish.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace loom::store {

class HandshakeAdmission {
 public:
  using Clock = std::chrono::steady_clock;
  struct Limits {
    std::size_t total;
    std::size_t per_source;
    std::chrono::milliseconds evictable_after;  // a handshake younger than this is never evicted
  };
  struct Decision {
    bool admit = true;
    std::optional<std::uint64_t> evict;  // the connection to close first, when admitted
  };

  explicit HandshakeAdmission(Limits limits) : limits_(limits) {}

  // Whether a new connection from `source` may start its handshake now.
  Decision decide(const std::string& source, Clock::time_point now) const;
  void add(std::uint64_t id, const std::string& source, Clock::time_point now);
  void remove(std::uint64_t id);  // no-op for an id not present
  std::size_t size() const { return pending_.size(); }
  std::size_t from(const std::string& source) const;

 private:
  struct Entry {
    std::string source;
    Clock::time_point since;
  };
  Decision make_room(const std::string* source, Clock::time_point now) const;

  Limits limits_;
  std::map<std::uint64_t, Entry> pending_;  // ids grow with time: oldest first
  std::map<std::string, std::size_t> per_source_;
};

}  // namespace loom::store
