#include "store/file_store_log.hpp"

#include <cstring>

#include <fmt/format.h>

#include "base/wire.hpp"
#include "loom/loom.hpp"
#include "store/store_protocol.hpp"

namespace loom::store::file_log {
namespace {

constexpr std::size_t kHeaderBytes = 1 + 4;

std::uint32_t u32_at(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

// A record is parsed by hand rather than with WireReader: a short record must be told apart
// from a malformed one, and its lengths checked for plausibility first, so that a corrupt
// length field in the middle of the log is an error and not "the end".
Contents replay(const std::uint8_t* data, std::size_t size) {
  Contents out;
  std::size_t at = 0;
  while (at < size) {
    const std::size_t left = size - at;
    const std::uint8_t* p = data + at;
    const auto type = static_cast<Record>(p[0]);
    if (type != Record::set && type != Record::remove)
      throw StoreError(fmt::format("unknown record type {} at byte {}", p[0], at));
    if (left < kHeaderBytes) break;
    const std::uint32_t key_bytes = u32_at(p + 1);
    if (key_bytes > protocol::kMaxKeyBytes)
      throw StoreError(fmt::format("record at byte {} has a key of {} bytes", at, key_bytes));
    if (left < kHeaderBytes + key_bytes + 4) break;
    const std::uint32_t value_bytes = u32_at(p + kHeaderBytes + key_bytes);
    if (value_bytes > protocol::kMaxMessageBytes || (type == Record::remove && value_bytes != 0))
      throw StoreError(fmt::format("record at byte {} has a value of {} bytes", at, value_bytes));
    const std::size_t record_bytes = kHeaderBytes + key_bytes + 4 + std::size_t{value_bytes};
    if (left < record_bytes) break;
    std::string key(reinterpret_cast<const char*>(p + kHeaderBytes), key_bytes);
    if (type == Record::set) {
      const std::uint8_t* value = p + kHeaderBytes + key_bytes + 4;
      auto& slot = out.entries[key];
      slot.assign(value, value + value_bytes);
    } else {
      out.entries.erase(key);
    }
    at += record_bytes;
  }
  out.valid_bytes = at;
  for (const auto& [key, value] : out.entries) out.live_bytes += encoded_size(key, value);
  return out;
}

Bytes encode(Record type, const std::string& key, const Bytes& value) {
  base::WireWriter w;
  w.u8(static_cast<std::uint8_t>(type));
  w.str(key);
  w.blob(value);
  return std::move(w.buffer());
}

std::size_t encoded_size(const std::string& key, const Bytes& value) {
  return kHeaderBytes + key.size() + 4 + value.size();
}

}  // namespace loom::store::file_log
