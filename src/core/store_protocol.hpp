// Store wire protocol. Request: [u32 length][u8 opcode][fields]. Response: [u32 length][u8 status]
// [fields]. Lengths are checked against kMaxMessageBytes before anything is allocated.
#pragma once

#include <cstdint>

namespace loom::core::store_protocol {

enum class Op : std::uint8_t { set = 1, get, add, compare_set, remove, wait, check };
enum class Status : std::uint8_t { ok = 0, timeout = 1, error = 2 };

inline constexpr std::uint32_t kMaxMessageBytes = 64u << 20;
inline constexpr std::uint32_t kMaxKeyBytes = 4096;
inline constexpr std::uint32_t kMaxKeysPerWait = 1u << 16;

}  // namespace loom::core::store_protocol
