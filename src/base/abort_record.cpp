#include "base/abort_record.hpp"

#include <cstdlib>

#include <fmt/format.h>

namespace loom::base {

// "<kind>\n<reporter>\n<failed>\n<cause>"
Bytes AbortRecord::encode() const {
  std::string text = fmt::format("{}\n{}\n{}\n{}", static_cast<int>(kind), reporter, failed, cause);
  return Bytes(text.begin(), text.end());
}

std::optional<AbortRecord> AbortRecord::decode(const Bytes& bytes) {
  const std::string text(bytes.begin(), bytes.end());
  std::size_t at[3];
  std::size_t from = 0;
  for (auto& a : at) {
    a = text.find('\n', from);
    if (a == std::string::npos) return std::nullopt;
    from = a + 1;
  }
  auto number = [&](std::size_t begin, std::size_t end) -> std::optional<int> {
    const std::string s = text.substr(begin, end - begin);
    char* stop = nullptr;
    const long v = std::strtol(s.c_str(), &stop, 10);
    if (s.empty() || *stop != '\0' || v < -1 || v > (1 << 30)) return std::nullopt;
    return static_cast<int>(v);
  };
  const auto kind = number(0, at[0]), reporter = number(at[0] + 1, at[1]),
             failed = number(at[1] + 1, at[2]);
  if (!kind || !reporter || !failed || *kind < 1 || *kind > static_cast<int>(Kind::aborted))
    return std::nullopt;
  AbortRecord r;
  r.kind = static_cast<Kind>(*kind);
  r.reporter = *reporter;
  r.failed = *failed;
  r.cause = text.substr(at[2] + 1);
  return r;
}

void AbortRecord::raise(const std::string& context) const {
  const std::string what = fmt::format("{}: {} (reported by rank {})", context, cause, reporter);
  switch (kind) {
    case Kind::mismatch:
      throw CollectiveMismatch(what, cause);
    case Kind::timeout:
      throw TimeoutError(what);
    case Kind::peer_failed:
    case Kind::aborted:
      break;
  }
  throw PeerError(what, failed);
}

}  // namespace loom::base
