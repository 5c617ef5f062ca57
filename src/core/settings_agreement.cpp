#include "core/settings_agreement.hpp"

#include <algorithm>
#include <functional>
#include <iterator>
#include <map>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "store/keys.hpp"

namespace loom::core {
namespace {

struct Field {
  std::string_view key;   // in the line
  std::string_view name;  // how a user sets it
};

// In the order a disagreement is reported: the first that differs is named.
constexpr Field kFields[] = {
    {"transport", "the transport (LOOM_TRANSPORT, LOOM_SHM_DISABLE, Options::transport)"},
    {"algo", "LOOM_ALGO (Options::algorithm)"},
    {"trials", "LOOM_TRIALS"},
    {"slots", "LOOM_SLOTS (Options::slots)"},
    {"buffer", "LOOM_BUFFSIZE (Options::buffer_bytes)"},
    {"sockets", "LOOM_NSOCKS (Options::sockets_per_peer)"},
    {"cuda_ipc", "LOOM_CUDA_IPC"},
    {"cuda_direct", "LOOM_CUDA_DIRECT"},
    {"cuda_buffer", "LOOM_CUDA_BUFFSIZE"},
};

std::string raw_value(std::string_view key, const base::Config& c) {
  if (key == "transport") return c.transport;
  if (key == "algo") return c.selection.algorithm;
  if (key == "trials") return c.selection.trials ? "1" : "0";
  if (key == "slots") return std::to_string(c.link.slots);
  if (key == "buffer") return std::to_string(c.link.buffer_bytes);
  if (key == "sockets") return std::to_string(c.link.sockets_per_peer);
  if (key == "cuda_ipc") return c.link.cuda_ipc ? "1" : "0";
  if (key == "cuda_direct") return c.selection.cuda_direct ? "1" : "0";
  return std::to_string(c.link.cuda_buffer_bytes);  // cuda_buffer
}

// Within a line: no tab or newline.
std::string value_of(std::string_view key, const base::Config& c) {
  std::string value = raw_value(key, c);
  std::replace_if(
      value.begin(), value.end(), [](char ch) { return ch == '\t' || ch == '\n'; }, ' ');
  return value;
}

// key -> value of one line; a field without '=' is kept whole as a key with no value.
std::map<std::string, std::string, std::less<>> fields_of(std::string_view line) {
  std::map<std::string, std::string, std::less<>> out;
  while (!line.empty()) {
    const auto tab = line.find('\t');
    const std::string_view field = line.substr(0, tab);
    const auto eq = field.find('=');
    out.emplace(std::string(field.substr(0, eq)),
                eq == std::string_view::npos ? std::string() : std::string(field.substr(eq + 1)));
    line = tab == std::string_view::npos ? std::string_view() : line.substr(tab + 1);
  }
  return out;
}

std::string ranks_text(const std::vector<int>& ranks) {
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ","));
}

// "'' on ranks 0,2; 'allreduce:ring' on rank 1": the values in the order their first rank has.
std::string who_has_what(const std::vector<std::string>& values, const std::vector<int>& numbers) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (std::size_t r = 0; r < values.size(); ++r) {
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return g.first == values[r]; });
    if (it == groups.end()) it = groups.insert(groups.end(), {values[r], {}});
    it->second.push_back(r < numbers.size() ? numbers[r] : static_cast<int>(r));
  }
  std::vector<std::string> parts;
  for (const auto& [value, ranks] : groups)
    parts.push_back(fmt::format("'{}' on {}", value, ranks_text(ranks)));
  return fmt::format("{}", fmt::join(parts, "; "));
}

static_assert(std::size(kFields) == kSettingsFields);

}  // namespace

std::string settings_line(const base::Config& config) {
  std::vector<std::string> fields;
  for (const Field& f : kFields)
    fields.push_back(fmt::format("{}={}", f.key, value_of(f.key, config)));
  return fmt::format("{}", fmt::join(fields, "\t"));
}

std::string settings_disagreement(const std::vector<std::string>& lines,
                                  const std::vector<int>& numbers) {
  if (std::all_of(lines.begin(), lines.end(), [&](const auto& l) { return l == lines.front(); }))
    return {};
  std::vector<std::map<std::string, std::string, std::less<>>> parsed;
  for (const auto& line : lines) parsed.push_back(fields_of(line));
  for (const Field& f : kFields) {
    std::vector<std::string> values;
    for (const auto& fields : parsed) {
      const auto it = fields.find(f.key);
      values.push_back(it == fields.end() ? "(not sent)" : it->second);
    }
    if (std::any_of(values.begin(), values.end(), [&](const auto& v) { return v != values[0]; }))
      return fmt::format("{} differs between ranks: {}; it must be the same on every rank", f.name,
                         who_has_what(values, numbers));
  }
  // Fields this build does not know: another build of Loom on some rank.
  return fmt::format(
      "the ranks' settings differ in fields this build of Loom does not know (another version "
      "of Loom on some rank?): {}",
      who_has_what(lines, numbers));
}

void check_settings_agree(Store& store, int rank, const std::vector<std::string>& lines,
                          std::chrono::milliseconds timeout) {
  const std::string why = settings_disagreement(lines);
  if (why.empty()) return;
  // Every rank found the same disagreement in the same records. They meet here before raising,
  // so that the rank hosting the store (rank 0 under env:// and tcp://) keeps it until every
  // rank has read them; a rank that does not come in time is not waited for further.
  std::vector<std::string> keys;
  for (std::size_t r = 0; r < lines.size(); ++r)
    keys.push_back(store::keys::settings_refused(static_cast<int>(r)));
  try {
    store.set(store::keys::settings_refused(rank), std::string("1"));
    store.wait(keys, std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(30)));
  } catch (const Error&) {  // the error below says what matters
  }
  throw InvalidArgument(fmt::format("init: rank {}: {}", rank, why));
}

std::vector<std::int64_t> settings_fingerprint(const base::Config& config) {
  std::vector<std::int64_t> out;
  for (const Field& f : kFields)
    out.push_back(static_cast<std::int64_t>(std::hash<std::string>{}(value_of(f.key, config))));
  return out;
}

std::string line_from_fingerprint(const base::Config& mine, const std::int64_t* theirs) {
  const std::vector<std::int64_t> own = settings_fingerprint(mine);
  std::vector<std::string> fields;
  for (std::size_t i = 0; i < kSettingsFields; ++i)
    fields.push_back(fmt::format(
        "{}={}", kFields[i].key,
        own[i] == theirs[i] ? value_of(kFields[i].key, mine) : std::string("(another value)")));
  return fmt::format("{}", fmt::join(fields, "\t"));
}

}  // namespace loom::core
