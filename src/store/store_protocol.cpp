#include "store/store_protocol.hpp"

#include <cstring>

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

namespace loom::store::protocol {
using base::WireReader;
using base::WireWriter;
namespace {

void expect_end(const WireReader& r, const char* what) {
  if (!r.done()) throw StoreError(fmt::format("malformed {} reply: trailing bytes", what));
}

}  // namespace

std::vector<std::uint8_t> encode_reply(Status status, const std::vector<std::uint8_t>& payload) {
  std::vector<std::uint8_t> out(4 + 1 + payload.size());
  const auto len = static_cast<std::uint32_t>(payload.size() + 1);
  std::memcpy(out.data(), &len, 4);
  out[4] = static_cast<std::uint8_t>(status);
  if (!payload.empty()) std::memcpy(out.data() + 5, payload.data(), payload.size());
  return out;
}

Reply parse_reply(const std::uint8_t* data, std::size_t size) {
  if (size == 0) throw StoreError("malformed reply: no status byte");
  const std::uint8_t status = data[0];
  if (status > static_cast<std::uint8_t>(Status::error))
    throw StoreError(fmt::format("malformed reply: unknown status {}", static_cast<int>(status)));
  return {static_cast<Status>(status), std::vector<std::uint8_t>(data + 1, data + size)};
}

void reply_empty(const Reply& reply) {
  if (!reply.payload.empty())
    throw StoreError(fmt::format("malformed reply: {} unexpected bytes", reply.payload.size()));
}

std::vector<std::uint8_t> reply_value(const Reply& reply) {
  WireReader r(reply.payload.data(), reply.payload.size());
  auto value = r.blob();
  expect_end(r, "value");
  return value;
}

std::int64_t reply_integer(const Reply& reply) {
  WireReader r(reply.payload.data(), reply.payload.size());
  const std::int64_t value = r.i64();
  expect_end(r, "integer");
  return value;
}

bool reply_flag(const Reply& reply) {
  const auto flags = reply_flags(reply, 1);
  return flags[0];
}

std::vector<bool> reply_flags(const Reply& reply, std::size_t count) {
  if (reply.payload.size() != count)
    throw StoreError(
        fmt::format("malformed reply: {} flags for {} keys", reply.payload.size(), count));
  std::vector<bool> flags;
  for (std::uint8_t b : reply.payload) {
    if (b > 1) throw StoreError(fmt::format("malformed reply: flag {}", static_cast<int>(b)));
    flags.push_back(b == 1);
  }
  return flags;
}

std::string reply_error(const Reply& reply) {
  WireReader r(reply.payload.data(), reply.payload.size());
  std::string why = r.str();
  expect_end(r, "error");
  return why;
}

}  // namespace loom::store::protocol
