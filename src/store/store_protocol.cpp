#include "store/store_protocol.hpp"

#include <fmt/format.h>

#include "base/wire.hpp"

namespace loom::store::protocol {
using base::WireReader;
using base::WireWriter;
namespace {

std::string checked_key(WireReader& r) {
  std::string key = r.str();
  if (key.size() > kMaxKeyBytes)
    throw StoreError(fmt::format("key of {} bytes is too long", key.size()));
  return key;
}

std::uint32_t checked_key_count(WireReader& r, const char* what) {
  const std::uint32_t n = r.u32();
  if (n > kMaxKeysPerWait) throw StoreError(fmt::format("{} of {} keys is too many", what, n));
  return n;
}

}  // namespace

Request parse_request(const std::uint8_t* data, std::size_t size) {
  WireReader r(data, size);
  Request req;
  req.op = static_cast<Op>(r.u8());
  switch (req.op) {
    case Op::set:
      req.keys.push_back(checked_key(r));
      req.value = r.blob();
      break;
    case Op::get:
      req.keys.push_back(checked_key(r));
      req.timeout_ms = r.u32();
      break;
    case Op::wait: {
      const std::uint32_t n = checked_key_count(r, "wait");
      for (std::uint32_t i = 0; i < n; ++i) req.keys.push_back(checked_key(r));
      req.timeout_ms = r.u32();
      break;
    }
    case Op::add:
      req.keys.push_back(checked_key(r));
      req.delta = r.i64();
      break;
    case Op::compare_set:
      req.keys.push_back(checked_key(r));
      req.expected = r.blob();
      req.value = r.blob();
      break;
    case Op::remove:
      req.keys.push_back(checked_key(r));
      break;
    case Op::check: {
      const std::uint32_t n = checked_key_count(r, "check");
      for (std::uint32_t i = 0; i < n; ++i) req.keys.push_back(checked_key(r));
      break;
    }
    default:
      throw StoreError(fmt::format("unknown opcode {}", static_cast<int>(req.op)));
  }
  if (!r.done()) throw StoreError("malformed message: trailing bytes after the last field");
  return req;
}

}  // namespace loom::store::protocol
