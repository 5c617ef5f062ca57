#include "core/shrink_decision.hpp"

#include <charconv>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "loom/loom.hpp"

namespace loom::core {

Bytes encode(const ShrinkDecision& d) {
  const std::string text = fmt::format("{}:{}", d.min_nodes, fmt::join(d.members, ","));
  return Bytes(text.begin(), text.end());
}

namespace {

// A count as encode writes it: digits, no sign, no leading zero; `end` of the number or null.
const char* read_count(const char* p, const char* end, int& value) {
  if (p == end || *p < '0' || *p > '9' || (*p == '0' && p + 1 < end && p[1] >= '0' && p[1] <= '9'))
    return nullptr;
  auto [next, ec] = std::from_chars(p, end, value);
  return ec == std::errc() ? next : nullptr;
}

}  // namespace

ShrinkDecision decode_shrink_decision(const Bytes& bytes, int size) {
  const auto malformed = [] {
    return StoreError("shrink: the members recorded in the store are malformed");
  };
  ShrinkDecision d;
  const char* p = reinterpret_cast<const char*>(bytes.data());
  const char* end = p + bytes.size();
  const char* colon = read_count(p, end, d.min_nodes);
  if (colon == nullptr || colon == end || *colon != ':') throw malformed();
  p = colon + 1;
  while (p < end) {
    int r = -1;
    const char* next = read_count(p, end, r);
    if (next == nullptr || r >= size || (!d.members.empty() && r <= d.members.back()))
      throw malformed();
    d.members.push_back(r);
    // A comma, then another rank; nothing else.
    if (next != end && (*next != ',' || next + 1 == end)) throw malformed();
    p = next == end ? end : next + 1;
  }
  return d;
}

}  // namespace loom::core
