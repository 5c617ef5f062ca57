// Store wire protocol. Request: [u32 length][u8 opcode][fields]. Response: [u32 length][u8 status]
// [fields]. Lengths are checked against kMaxMessageBytes before anything is allocated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::store::protocol {

enum class Op : std::uint8_t { set = 1, get, add, compare_set, remove, wait, check };
enum class Status : std::uint8_t { ok = 0, timeout = 1, error = 2 };

inline constexpr std::uint32_t kMaxMessageBytes = 64u << 20;
inline constexpr std::uint32_t kMaxKeyBytes = 4096;
inline constexpr std::uint32_t kMaxKeysPerWait = 1u << 16;

// One decoded request body (after the length prefix).
struct Request {
  Op op{};
  std::vector<std::string> keys;       // one, or several for wait and check
  std::vector<std::uint8_t> value;     // set: the value; compare_set: the desired value
  std::vector<std::uint8_t> expected;  // compare_set
  std::int64_t delta = 0;              // add
  std::uint32_t timeout_ms = 0;        // get, wait
};

// Decodes a request body, checking every field against the bytes received and the limits
// above; raises StoreError naming what is wrong. Nothing is allocated beyond what was received.
Request parse_request(const std::uint8_t* data, std::size_t size);

// One decoded reply body (after the length prefix).
struct Reply {
  Status status{};
  std::vector<std::uint8_t> payload;
};

// A whole reply frame, length prefix included.
std::vector<std::uint8_t> encode_reply(Status status, const std::vector<std::uint8_t>& payload);
// Decodes a reply body; raises StoreError when it is empty or its status is not one above.
Reply parse_reply(const std::uint8_t* data, std::size_t size);

// The payload of each operation's reply, checked to be exactly that; each raises StoreError
// naming what is wrong.
void reply_empty(const Reply& reply);                                  // set, wait
std::vector<std::uint8_t> reply_value(const Reply& reply);             // get, compare_set
std::int64_t reply_integer(const Reply& reply);                        // add
bool reply_flag(const Reply& reply);                                   // remove
std::vector<bool> reply_flags(const Reply& reply, std::size_t count);  // check
std::string reply_error(const Reply& reply);  // the server's reason (error)

}  // namespace loom::store::protocol
