#include "algorithms/rules.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "algorithms/algorithm_table.hpp"
#include "base/config.hpp"

namespace loom::algorithms {

namespace {

std::optional<std::size_t> parse_bytes(std::string_view text) {
  if (text.empty()) return std::nullopt;
  return base::parse_size(std::string(text));
}

// One rule's text, as it is read.
class RuleReader {
 public:
  RuleReader(std::string_view text, std::string_view source, std::string_view item)
      : text_(text), source_(source), item_(item) {}

  InvalidArgument bad(const std::string& why) const {
    return InvalidArgument(fmt::format("{}='{}': rule '{}': {}", source_, text_, item_, why));
  }

  // The rule's fields, split at colons.
  std::vector<std::string_view> fields() const {
    std::vector<std::string_view> fields;
    for (std::size_t from = 0;;) {
      const auto colon = item_.find(':', from);
      fields.push_back(item_.substr(from, colon - from));
      if (colon == std::string_view::npos) break;
      from = colon + 1;
    }
    if (fields.size() > 3 || item_.empty())
      throw bad("expected [operation:]algorithm[@slice][:from-to]");
    return fields;
  }

  // "name@slice": the row of `collective` so named, and the slice (0: none given).
  std::pair<const Algorithm*, std::size_t> algorithm(Kind collective, std::string_view name) const {
    std::size_t slice = 0;
    if (const auto at = name.find('@'); at != std::string_view::npos) {
      const auto v = parse_bytes(name.substr(at + 1));
      if (!v || *v < 4096)
        throw bad(fmt::format("'{}' is not a slice of 4K or more", name.substr(at + 1)));
      slice = *v;
      name = name.substr(0, at);
    }
    const Algorithm* algorithm = nullptr;
    std::string known;
    for (const Algorithm& a : algorithm_table()) {
      if (a.collective != collective) continue;
      known += fmt::format("{}{}", known.empty() ? "" : ", ", a.name);
      if (a.name == name) algorithm = &a;
    }
    if (algorithm == nullptr)
      throw bad(fmt::format("'{}' is not a {} algorithm ({})", name, rule_name(collective), known));
    if (slice != 0 && !algorithm->traits.any_slice)
      throw bad(fmt::format("{} {} chooses its own slice", rule_name(collective), name));
    return {algorithm, slice};
  }

  // "from-to", either end left open: [from, to).
  std::pair<std::size_t, std::size_t> range(std::string_view range) const {
    std::size_t from = 0, to = SIZE_MAX;
    const auto dash = range.find('-');
    if (dash == std::string_view::npos)
      throw bad("a size range is from-to (either end may be left out)");
    const std::string_view lo = range.substr(0, dash), hi = range.substr(dash + 1);
    if (!lo.empty()) {
      auto v = parse_bytes(lo);
      if (!v) throw bad(fmt::format("'{}' is not a size", lo));
      from = *v;
    }
    if (!hi.empty()) {
      auto v = parse_bytes(hi);
      if (!v) throw bad(fmt::format("'{}' is not a size", hi));
      to = *v;
    }
    if (from >= to) throw bad("the range is empty");
    return {from, to};
  }

 private:
  std::string_view text_, source_, item_;
};

}  // namespace

std::vector<Rule> parse_rules(std::string_view text, std::string_view source) {
  std::vector<Rule> rules;
  Kind collective = Kind::all_reduce;
  std::string_view rest = text;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const RuleReader reader(text, source, rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    const std::vector<std::string_view> fields = reader.fields();
    // The first field names an operation when another field follows and it is not an algorithm.
    std::size_t next = 0;
    if (fields.size() >= 2) {
      bool is_operation = false;
      for (Kind k : kAllKinds)
        if (fields[0] == rule_name(k)) collective = k, is_operation = true;
      if (is_operation)
        next = 1;
      else if (fields.size() == 3)
        throw reader.bad(fmt::format("'{}' is not an operation", fields[0]));
    }
    const auto [algorithm, slice] = reader.algorithm(collective, fields[next]);
    std::size_t from = 0, to = SIZE_MAX;
    if (next + 1 < fields.size()) std::tie(from, to) = reader.range(fields[next + 1]);
    rules.push_back(Rule{collective, algorithm, from, to, slice});
  }
  return rules;
}

std::string_view rule_name(Kind kind) {
  for (const KindNames& k : kKindNames)
    if (k.kind == kind) return k.rule;
  return "?";
}

}  // namespace loom::algorithms
