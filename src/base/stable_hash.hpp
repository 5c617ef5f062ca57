// A hash of text that every process computes alike, whatever its build and standard library
// (std::hash may differ between them): what ranks derive apart and must agree on (a child's key
// space and token, a setting's fingerprint) is named with it.
#pragma once

#include <cstdint>
#include <string_view>

namespace loom::base {

// FNV-1a, 64 bits.
inline std::uint64_t stable_hash(std::string_view text) {
  std::uint64_t h = 14695981039346656037ull;
  for (const char ch : text) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
  return h;
}

}  // namespace loom::base
