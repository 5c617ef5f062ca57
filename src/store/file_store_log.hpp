// The FileStore's file: a log of records, each [u8 type][u32 key length][key][u32 value length]
// [value], replayed in order (set, or remove). Every access holds the file's lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace loom::store::file_log {

enum class Record : std::uint8_t { set = 1, remove = 2 };
using Bytes = std::vector<std::uint8_t>;

struct Contents {
  std::map<std::string, Bytes> entries;
  std::size_t valid_bytes = 0;  // the complete records; what lies beyond is a torn last record
  std::size_t live_bytes = 0;   // the size of the log rewritten as one record per entry
};

// Replays a log. A last record cut short (its writer died or ran out of space mid-write) ends
// the replay before it; any other malformed record raises StoreError.
Contents replay(const std::uint8_t* data, std::size_t size);
Bytes encode(Record type, const std::string& key, const Bytes& value);
std::size_t encoded_size(const std::string& key, const Bytes& value);

}  // namespace loom::store::file_log
