#include "core/settings_agreement.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <exception>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <string_view>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/stable_hash.hpp"
#include "store/keys.hpp"

namespace loom::core {
namespace {

std::string flag(bool on) {
  return on ? "1" : "0";
}

struct Field {
  std::string_view key;   // in the line
  std::string_view name;  // how a user sets it
  std::string (*raw_value)(const base::Config&);
  // Shapes only what runs between ranks of one host (CUDA IPC connections, calls on one host's
  // device buffers): compared within each host, so that hosts may differ.
  bool per_host = false;
};

// In the order a disagreement is reported: the first that differs is named.
constexpr Field kFields[] = {
    {"transport", "the transport (LOOM_TRANSPORT, LOOM_SHM_DISABLE, Options::transport)",
     [](const base::Config& c) { return c.transport; }},
    {"algo", "LOOM_ALGO (Options::algorithm)",
     [](const base::Config& c) { return c.selection.algorithm; }},
    {"trials", "LOOM_TRIALS", [](const base::Config& c) { return flag(c.selection.trials); }},
    {"slots", "LOOM_SLOTS (Options::slots)",
     [](const base::Config& c) { return std::to_string(c.link.slots); }},
    {"buffer", "LOOM_BUFFSIZE (Options::buffer_bytes)",
     [](const base::Config& c) { return std::to_string(c.link.buffer_bytes); }},
    {"sockets", "LOOM_NSOCKS (Options::sockets_per_peer)",
     [](const base::Config& c) { return std::to_string(c.link.sockets_per_peer); }},
    {"cuda_ipc", "LOOM_CUDA_IPC", [](const base::Config& c) { return flag(c.link.cuda_ipc); },
     true},
    {"cuda_direct", "LOOM_CUDA_DIRECT",
     [](const base::Config& c) { return flag(c.selection.cuda_direct); }, true},
    {"cuda_buffer", "LOOM_CUDA_BUFFSIZE",
     [](const base::Config& c) { return std::to_string(c.link.cuda_buffer_bytes); }, true},
};

// The same value in every process and build, whatever the standard library.
std::int64_t fingerprint_of(std::string_view text) {
  return static_cast<std::int64_t>(base::stable_hash(text));
}

// Within a line: no tab or newline.
std::string one_line(std::string text) {
  std::replace_if(
      text.begin(), text.end(), [](char ch) { return ch == '\t' || ch == '\n'; }, ' ');
  return text;
}

std::string value_of(const Field& f, const base::Config& c) {
  return one_line(f.raw_value(c));
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

// "rank 3", "ranks 0-3,6": runs of consecutive ranks as ranges.
std::string ranks_text(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    parts.push_back(j == i ? fmt::format("{}", ranks[i])
                           : fmt::format("{}{}{}", ranks[i], j == i + 1 ? "," : "-", ranks[j]));
    i = j + 1;
  }
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(parts, ","));
}

// "'' on ranks 0,2; 'allreduce:ring' on rank 1": the values in the order their first rank has;
// values[i] is rank numbers[i]'s.
std::string who_has_what(const std::vector<std::string>& values, const std::vector<int>& numbers) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (std::size_t r = 0; r < values.size(); ++r) {
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return g.first == values[r]; });
    if (it == groups.end()) it = groups.insert(groups.end(), {values[r], {}});
    it->second.push_back(numbers[r]);
  }
  std::vector<std::string> parts;
  for (const auto& [value, ranks] : groups)
    parts.push_back(fmt::format("'{}' on {}", value, ranks_text(ranks)));
  return fmt::format("{}", fmt::join(parts, "; "));
}

// The ranks (indices into the lines) whose values of a field must agree, each group a host for
// a per-host field, else all of them.
std::vector<std::vector<std::size_t>> groups_of(const Field& f, std::size_t n,
                                                const std::vector<std::string>& hosts) {
  std::vector<std::vector<std::size_t>> groups;
  std::map<std::string, std::size_t> index;
  for (std::size_t r = 0; r < n; ++r) {
    const std::string host = f.per_host && r < hosts.size() ? hosts[r] : std::string();
    auto [it, added] = index.emplace(host, groups.size());
    if (added) groups.emplace_back();
    groups[it->second].push_back(r);
  }
  return groups;
}

static_assert(std::size(kFields) == kSettingsFields);

// A line's field that carries the error a rank's own settings raised (refused_line).
constexpr std::string_view kRefusedKey = "refused";
// A group member's slot that another member marked: having waited for it in vain (a timeout),
// or stopping while it was absent (its parent stopped, or the member died).
constexpr std::string_view kAbsentPrefix = "absent=";
constexpr std::string_view kStoppedPrefix = "stopped=";
// How long create_group's wait for its members lasts before it looks at the parent again.
constexpr std::chrono::milliseconds kGroupRound{500};
// How long a round's requests may take beyond their wait (the round's wait, the look at which
// members came, a mark while stopping): a store whose host froze must not hold the member past
// its parent's halt (a store's own requests give up only at the child's timeout, or 10 s after
// their wait).
constexpr std::chrono::milliseconds kGroupPoll{1000};

// Before the fields are compared: the ranks whose settings were invalid, each with its error,
// then the ranks that sent none (another version of Loom); empty when neither.
std::string refusals_or_missing(
    const std::vector<std::map<std::string, std::string, std::less<>>>& parsed,
    const std::vector<int>& ranks, std::string_view consequence) {
  std::vector<int> refused, silent;
  std::vector<std::string> errors;
  for (std::size_t i = 0; i < parsed.size(); ++i) {
    if (const auto it = parsed[i].find(kRefusedKey); it != parsed[i].end()) {
      refused.push_back(ranks[i]);
      errors.push_back(it->second);
    } else if (std::none_of(std::begin(kFields), std::end(kFields),
                            [&](const Field& f) { return parsed[i].contains(f.key); })) {
      silent.push_back(ranks[i]);
    }
  }
  if (!refused.empty())
    return fmt::format("the settings of {} are invalid: {}; {}", ranks_text(refused),
                       who_has_what(errors, refused), consequence);
  if (!silent.empty())
    return fmt::format(
        "{} sent no settings to compare (another version of Loom?): every rank "
        "must run the same version",
        ranks_text(silent));
  return {};
}

// Every rank found the same reason to stop in the same records (or, refusing its own settings,
// gave it). Rank 0, where this process serves the store (`hosts_store`), keeps it until every
// other rank has said so; they leave at once, and so does a rank 0 that serves nothing. A rank
// that does not come in time is not waited for further.
void leave_together(Store& store, int rank, std::size_t size, std::chrono::milliseconds timeout,
                    bool hosts_store) {
  if (rank == 0 && !hosts_store) return;
  try {
    if (rank != 0) {
      store.set(store::keys::settings_refused(rank), std::string("1"));
    } else {
      std::vector<std::string> keys;
      for (std::size_t r = 1; r < size; ++r)
        keys.push_back(store::keys::settings_refused(static_cast<int>(r)));
      if (!keys.empty())
        store.wait(keys, std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(30)));
    }
  } catch (const Error&) {  // the caller's error says what matters
  }
}

// A group member's slot, written once: `text` where it was empty; returns what it holds after.
std::string take_slot(Store& space, const std::string& key, std::string_view text) {
  const Bytes held = space.compare_set(key, Bytes{}, Bytes(text.begin(), text.end()));
  return std::string(held.begin(), held.end());
}

// A bounded clone of the group's store (kGroupPoll beyond each request's own wait), made when
// first needed and again after it failed to open (a frozen store host does not answer its login);
// `space` itself where the store cannot bound its requests (clone_bounded is null).
class BoundedStore {
 public:
  explicit BoundedStore(Store& space) : space_(space) {}
  // Raises TimeoutError or StoreError where the clone cannot open now.
  Store& get() {
    if (unbounded_) return space_;
    if (!bounded_) {
      bounded_ = space_.clone_bounded(kGroupPoll);
      if (!bounded_) unbounded_ = true;
    }
    return bounded_ ? *bounded_ : space_;
  }

 private:
  Store& space_;
  std::shared_ptr<Store> bounded_;
  bool unbounded_ = false;
};

// How long a member keeps trying, through bounded requests, to write its own slot as it stops or
// refuses, or to mark the others' (a slow store still takes them; a stopped one holds it no more).
constexpr std::chrono::milliseconds kGroupPublish{3000};

// Writes `text` into slot `key` where it is empty (take_slot), tried again until `deadline`;
// returns what the slot holds. Raises the store's last failure at the deadline.
std::string take_slot_until(BoundedStore& store, const std::string& key, std::string_view text,
                            std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    try {
      return take_slot(store.get(), key, text);
    } catch (const TimeoutError&) {
      if (std::chrono::steady_clock::now() >= deadline) throw;
    } catch (const StoreError&) {
      if (std::chrono::steady_clock::now() >= deadline) throw;
    }
    std::this_thread::sleep_for(kGroupRound / 5);
  }
}

// The slots a member marked, and the store's failure where a slot could not be tried.
struct Marks {
  std::vector<std::size_t> marked;
  std::string failed;
};
// Marks the empty slots among `slots` (indices into `keys`) as given up on (`prefix`: why), for
// `why`, within `budget`: every slot is tried, whatever the store did with the one before (a
// member that came meanwhile keeps its line; a slot already filled keeps what it holds); once the
// budget is spent, a slot whose try failed ends the pass.
Marks mark_empty(BoundedStore& store, const std::vector<std::string>& keys,
                 const std::vector<std::size_t>& slots, std::string_view prefix,
                 std::string_view why, std::chrono::milliseconds budget) {
  const std::string marker = fmt::format("{}{}", prefix, why);
  const auto deadline = std::chrono::steady_clock::now() + budget;
  Marks out;
  for (const std::size_t i : slots) {
    try {
      if (take_slot_until(store, keys[i], marker, deadline) == marker) out.marked.push_back(i);
    } catch (const Error& e) {
      out.failed = e.what();
      break;
    }
  }
  return out;
}

bool marked(std::string_view slot) {
  return slot.starts_with(kAbsentPrefix) || slot.starts_with(kStoppedPrefix);
}

// A stop marker: "stopped=<rank at fault, or -1>;<why>".
std::string stop_marker(int cause, std::string_view why) {
  return fmt::format("{};{}", cause, why);
}
// The rank an error names as at fault, or -1.
int cause_of(const Error& e) {
  const auto* peer = dynamic_cast<const PeerError*>(&e);
  return peer != nullptr ? peer->peer() : -1;
}

// A marked slot's member, as the error its marker says (`what` before the reason): PeerError
// naming the rank the stopping member's error named (not the absent member, which may be only
// slow), or TimeoutError.
[[noreturn]] void raise_marked(std::string_view slot, const std::string& what) {
  if (slot.starts_with(kStoppedPrefix)) {
    std::string_view rest = slot.substr(kStoppedPrefix.size());
    int cause = -1;
    if (const std::size_t semi = rest.find(';'); semi != std::string_view::npos) {
      std::from_chars(rest.data(), rest.data() + semi, cause);
      rest.remove_prefix(semi + 1);
    }
    throw PeerError(fmt::format("{}: {}", what, rest), cause);
  }
  throw TimeoutError(fmt::format("{}: {}", what, slot.substr(kAbsentPrefix.size())));
}

}  // namespace

std::string refused_line(std::string_view why) {
  return fmt::format("{}={}", kRefusedKey, one_line(std::string(why)));
}

std::string settings_line(const base::Config& config) {
  std::vector<std::string> fields;
  for (const Field& f : kFields) fields.push_back(fmt::format("{}={}", f.key, value_of(f, config)));
  return fmt::format("{}", fmt::join(fields, "\t"));
}

std::string settings_disagreement(const std::vector<std::string>& lines,
                                  const std::vector<int>& numbers,
                                  const std::vector<std::string>& hosts, std::string_view among,
                                  std::string_view consequence) {
  if (std::all_of(lines.begin(), lines.end(), [&](const auto& l) { return l == lines.front(); }))
    return {};
  std::vector<int> ranks = numbers;  // line i's rank
  for (std::size_t r = ranks.size(); r < lines.size(); ++r) ranks.push_back(static_cast<int>(r));
  std::vector<std::map<std::string, std::string, std::less<>>> parsed;
  for (const auto& line : lines) parsed.push_back(fields_of(line));
  if (auto why = refusals_or_missing(parsed, ranks, consequence); !why.empty()) return why;
  for (const Field& f : kFields) {
    std::vector<std::string> values;
    for (const auto& fields : parsed) {
      const auto it = fields.find(f.key);
      values.push_back(it == fields.end() ? "(not sent)" : it->second);
    }
    for (const auto& group : groups_of(f, lines.size(), hosts)) {
      std::vector<std::string> group_values;
      std::vector<int> group_numbers;
      for (const std::size_t r : group) {
        group_values.push_back(values[r]);
        group_numbers.push_back(ranks[r]);
      }
      if (std::all_of(group_values.begin(), group_values.end(),
                      [&](const auto& v) { return v == group_values[0]; }))
        continue;
      return fmt::format("{} differs between ranks{}: {}; it must be the same on {}", f.name,
                         f.per_host ? " of one host" : "",
                         who_has_what(group_values, group_numbers),
                         f.per_host ? "every rank of a host" : among);
    }
  }
  // What is left of each line besides the fields this build knows.
  std::vector<std::string> rest;
  for (auto& fields : parsed) {
    for (const Field& f : kFields) fields.erase(std::string(f.key));
    rest.push_back(fmt::format("{}", fmt::join(fields, "\t")));
  }
  if (std::all_of(rest.begin(), rest.end(), [&](const auto& r) { return r == rest.front(); }))
    return {};  // only settings that may differ between hosts do
  // Fields this build does not know: another build of Loom on some rank.
  return fmt::format(
      "the ranks' settings differ in fields this build of Loom does not know (another version "
      "of Loom on some rank?): {}",
      who_has_what(lines, ranks));
}

void check_settings_agree(Store& store, int rank, const Topology& topology,
                          std::chrono::milliseconds timeout, bool hosts_store) {
  const std::string why =
      settings_disagreement(topology.settings_of_rank, {}, topology.host_of_rank, "every rank");
  if (why.empty()) return;
  leave_together(store, rank, topology.settings_of_rank.size(), timeout, hosts_store);
  throw InvalidArgument(fmt::format("init: rank {}: {}", rank, why));
}

void refuse_at_init(Store& store, int rank, int size, const std::string& worker_id,
                    std::string_view why, std::chrono::milliseconds timeout, bool hosts_store) {
  publish_topology_record(store, rank, worker_id, "-", {}, {}, refused_line(why));
  leave_together(store, rank, static_cast<std::size_t>(size), timeout, hosts_store);
}

namespace {

// Every member's slot, once all are written (each get answers at once).
std::vector<std::string> read_lines(Store& store, const std::vector<std::string>& keys) {
  std::vector<std::string> lines;
  for (const auto& k : keys) {
    const Bytes b = store.get(k, kGroupRound);
    lines.emplace_back(b.begin(), b.end());
  }
  return lines;
}

// A member that stops (`e`, being handled: its parent halted, or a member died) while `absent`
// had not come: no other may build the child without it. Its own slot first, where its line has
// not been seen (`published`; or the reply that said so was lost): a stop there tells the others.
// Where its line is there, it marks the empty slots (a stale view marks no slot another filled).
// Its marks are tried again for kGroupPublish where the store answered this round (`answered`), or
// took its own slot's write just now (a slow store still takes them), once where it did not (a
// stopped one holds the member no more); its own slot's write is tried once where its line was not
// seen (each round tried it already).
// Returns the lines where every slot was filled meanwhile (lines, or others' marks); else raises
// `e` (also where the store fails).
std::vector<std::string> stop_waiting(BoundedStore& store, const std::vector<std::string>& keys,
                                      std::size_t mine, int me, const std::string& line,
                                      bool published, bool answered,
                                      const std::vector<std::size_t>& absent, const Error& e) {
  const std::exception_ptr stop = std::current_exception();
  auto budget = answered ? kGroupPublish : std::chrono::milliseconds(0);
  if (!published) {
    try {
      published =
          take_slot_until(store, keys[mine],
                          fmt::format("{}{}", kStoppedPrefix, stop_marker(cause_of(e), e.what())),
                          std::chrono::steady_clock::now() + budget) == line;
    } catch (const Error&) {  // the store failed too: this member's own error stands
    }
    if (!published) std::rethrow_exception(stop);
    budget = kGroupPublish;  // the store answered
  }
  const Marks m = mark_empty(
      store, keys, absent, kStoppedPrefix,
      stop_marker(cause_of(e),
                  fmt::format("rank {} of the parent stopped waiting for it: {}", me, e.what())),
      budget);
  if (!m.marked.empty() || !m.failed.empty()) std::rethrow_exception(stop);
  try {
    return read_lines(store.get(), keys);
  } catch (const Error&) {  // this member's own error stands
    std::rethrow_exception(stop);
  }
}

}  // namespace

void publish_group_stop(Store& space, int group_rank, const Error& why) {
  // Its parent halted, often because the store host stopped: bounded requests, tried again for a
  // few seconds, so that a slow store still takes the stop and a stopped one does not hold it.
  BoundedStore store(space);
  take_slot_until(store, store::keys::group_settings(group_rank),
                  fmt::format("{}{}", kStoppedPrefix, stop_marker(cause_of(why), why.what())),
                  std::chrono::steady_clock::now() + kGroupPublish);
}

void publish_group_refusal(Store& space, int group_rank, std::string_view why) {
  BoundedStore store(space);  // as a stop's: the store host may have stopped meanwhile
  take_slot_until(store, store::keys::group_settings(group_rank), refused_line(why),
                  std::chrono::steady_clock::now() + kGroupPublish);
}

std::string group_settings_disagreement(Store& space, int group_rank,
                                        const std::vector<int>& members,
                                        const std::vector<std::string>& hosts,
                                        const std::string& line, std::chrono::milliseconds timeout,
                                        const std::function<void(const std::vector<int>&)>& check) {
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < members.size(); ++i)
    keys.push_back(store::keys::group_settings(static_cast<int>(i)));
  const std::size_t mine = static_cast<std::size_t>(group_rank);
  const int me = members[mine];
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  BoundedStore store(space);
  bool published = false;
  std::vector<std::size_t> absent;  // as the last round that the store answered saw them
  for (std::size_t i = 0; i < members.size(); ++i)
    if (i != mine) absent.push_back(i);
  std::vector<std::string> lines;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    const auto round = std::clamp(left, std::chrono::milliseconds(1), kGroupRound);
    const auto round_end = std::chrono::steady_clock::now() + round;
    std::string silent;  // the store's failure, where it did not answer this round
    std::string placed;
    bool failed = false;
    try {
      Store& s = store.get();
      if (!published) placed = take_slot(s, keys[mine], line);
      published = published || placed == line;
      if (published) {
        s.wait(keys, round);
        lines = read_lines(s, keys);
        break;
      }
    } catch (const TimeoutError& e) {  // the round ran out, or the store did not answer
      silent = e.what();
    } catch (const StoreError& e) {  // no store now (no login): no look this round
      silent = e.what();
      failed = true;
    }
    // A member another gave up on finds its slot marked: it raises too, and every member has
    // counted the group alike, so that the next create_group of the same ranks meets.
    if (!published && !placed.empty())
      raise_marked(placed, fmt::format("rank {} of the parent came too late for the group", me));
    if (published && !failed) {
      try {
        const std::vector<bool> present = store.get().check(keys);
        silent.clear();
        absent.clear();
        for (std::size_t i = 0; i < present.size(); ++i)
          if (!present[i]) absent.push_back(i);
        if (absent.empty()) {  // every slot written meanwhile
          lines = read_lines(store.get(), keys);
          break;
        }
      } catch (const Error& e) {  // the last view stands
        silent = e.what();
      }
    }
    std::this_thread::sleep_until(round_end);  // a round that failed at once is waited out
    std::vector<int> absent_ranks;
    for (const std::size_t i : absent) absent_ranks.push_back(members[i]);
    try {
      check(absent_ranks);
    } catch (const Error& e) {
      lines = stop_waiting(store, keys, mine, me, line, published, silent.empty(), absent, e);
      break;  // every slot was filled meanwhile
    }
    if (std::chrono::steady_clock::now() < deadline) continue;
    if (!published)
      throw StoreError(fmt::format("the store did not take this member's settings within {} ms: {}",
                                   timeout.count(), silent.empty() ? "no answer" : silent));
    const Marks m = mark_empty(
        store, keys, absent, kAbsentPrefix,
        fmt::format("the other members gave up waiting for it after {} ms", timeout.count()),
        kGroupPublish);
    std::vector<int> late;
    for (const std::size_t i : m.marked) late.push_back(members[i]);
    if (!late.empty())
      throw TimeoutError(
          fmt::format("{} of the parent did not publish its settings for the group within {} ms "
                      "(did not call create_group, or cannot reach the store)",
                      ranks_text(late), timeout.count()));
    try {  // every slot was filled meanwhile, or the store did not answer
      if (!m.failed.empty()) throw StoreError(m.failed);
      lines = read_lines(store.get(), keys);
      break;
    } catch (const Error& e) {
      throw StoreError(
          fmt::format("the store did not answer while the members were awaited within {} ms: {}",
                      timeout.count(), e.what()));
    }
  }
  for (std::size_t i = 0; i < lines.size(); ++i)
    if (marked(lines[i]))
      raise_marked(lines[i],
                   fmt::format("rank {} of the parent did not join the group", members[i]));
  return settings_disagreement(lines, members, hosts,
                               "every member of the group (ranks of the parent)",
                               "every member raises; the parent goes on");
}

std::vector<std::int64_t> settings_fingerprint(const base::Config& config) {
  std::vector<std::int64_t> out;
  for (const Field& f : kFields) out.push_back(fingerprint_of(value_of(f, config)));
  return out;
}

std::string line_from_fingerprint(const base::Config& mine, const std::int64_t* theirs) {
  const std::vector<std::int64_t> own = settings_fingerprint(mine);
  std::vector<std::string> fields;
  for (std::size_t i = 0; i < kSettingsFields; ++i)
    fields.push_back(fmt::format(
        "{}={}", kFields[i].key,
        own[i] == theirs[i] ? value_of(kFields[i], mine) : std::string("(another value)")));
  return fmt::format("{}", fmt::join(fields, "\t"));
}

}  // namespace loom::core
