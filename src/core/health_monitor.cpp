#include "core/health_monitor.hpp"

#include <cstdio>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "algorithms/collective.hpp"
#include "base/logging.hpp"
#include "core/failure_store.hpp"
#include "store/keys.hpp"

namespace loom::core {
namespace {

constexpr auto kTick = std::chrono::milliseconds(500);
constexpr auto kBeat = std::chrono::seconds(1);

}  // namespace

HealthMonitor::HealthMonitor(std::shared_ptr<Store> store, Settings settings,
                             const Progress& progress,
                             std::function<void(const base::AbortRecord&)> on_abort)
    : store_(std::move(store)),
      settings_(std::move(settings)),
      progress_(progress),
      on_abort_(std::move(on_abort)),
      started_(Clock::now()),
      watched_since_(started_) {
  if (!settings_.who) settings_.who = [](int r) { return fmt::format("rank {}", r); };
  watched_ = (settings_.rank + 1) % std::max(settings_.size, 1);
  thread_ = std::thread([this] { loop(); });
}

HealthMonitor::~HealthMonitor() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  // Leaving on purpose: the watcher of this rank must not take the silence for a failure. Not
  // when the store is silent already (a wait for it would only delay the shutdown).
  if (silent_since_ || abort_seen_) return;
  try {
    store_->set(store::keys::departed(settings_.rank), std::string("1"));
  } catch (const Error& e) {
    base::log().debug("health monitor: {}: cannot say it leaves: {}", who(settings_.rank),
                      e.what());
  }
}

void HealthMonitor::set_store_host(int rank, std::string where) {
  std::lock_guard lock(mu_);
  store_host_rank_ = rank;
  store_where_ = std::move(where);
}

std::string HealthMonitor::who(int rank) const {
  return settings_.who(rank);
}

std::optional<base::AbortRecord> HealthMonitor::publish(const base::AbortRecord& mine,
                                                        std::chrono::milliseconds wait,
                                                        std::chrono::milliseconds prefer_standing) {
  if (silent_.load(std::memory_order_acquire)) return std::nullopt;
  auto request = std::make_shared<PublishRequest>();
  request->mine = mine;
  request->prefer_standing = prefer_standing;
  std::unique_lock lock(mu_);
  const auto deadline = Clock::now() + wait;
  // One publish at a time: a second one waits its turn within its own deadline.
  if (!wake_.wait_until(lock, deadline, [&] { return stop_ || !request_ || request_->done; }) ||
      stop_)
    return std::nullopt;
  request_ = request;
  wake_.notify_all();
  wake_.wait_until(lock, deadline, [&] { return request->done; });
  return request->done ? request->standing : std::nullopt;
}

void HealthMonitor::loop() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    if (request_ && !request_->done) {
      lock.unlock();
      serve_publish();
      lock.lock();
      continue;
    }
    lock.unlock();
    const auto now = Clock::now();
    try {
      tick(now);
      store_answered(now);
    } catch (const Error& e) {
      store_silent(Clock::now(), e);  // after the request's own timeout
    }
    lock.lock();
    wake_.wait_for(lock, kTick, [this] { return stop_ || (request_ && !request_->done); });
  }
}

void HealthMonitor::serve_publish() {
  std::shared_ptr<PublishRequest> request;
  {
    std::lock_guard lock(mu_);
    request = request_;
  }
  std::optional<base::AbortRecord> standing;
  try {
    const auto until = Clock::now() + request->prefer_standing;
    while (!(standing = read_abort(*store_)) && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!standing) standing = publish_abort(*store_, request->mine);
    store_answered(Clock::now());
    mark_seen();
  } catch (const Error& e) {
    store_silent(Clock::now(), e);
  }
  std::lock_guard lock(mu_);
  request->standing = standing;
  request->done = true;
  wake_.notify_all();
}

void HealthMonitor::tick(Clock::time_point now) {
  if (!abort_seen_) {
    if (auto record = read_abort(*store_)) {
      abort_seen_ = true;
      on_abort_(*record);
      mark_seen();
    }
  }
  if (now >= next_beat_) {
    store_->add(store::keys::heartbeat(settings_.rank), 1);
    next_beat_ = now + kBeat;
  }
  if (settings_.size > 1 && settings_.heartbeat_timeout.count() > 0) watch_heartbeat(now);
  watch_stalls(now);
}

// On the monitor's thread, with the record read or published: once.
void HealthMonitor::mark_seen() {
  if (std::exchange(seen_marked_, true)) return;
  mark_abort_seen(*store_, settings_.rank);
}

void HealthMonitor::store_answered(Clock::time_point now) {
  last_answer_ = now;
  if (!silent_since_) return;
  std::string where;
  {
    std::lock_guard lock(mu_);
    where = store_where_;
  }
  base::log().info("{}: the rendezvous store{} answers again after {} s", who(settings_.rank),
                   where.empty() ? "" : " at " + where,
                   std::chrono::duration_cast<std::chrono::seconds>(now - *silent_since_).count());
  silent_since_.reset();
  silent_.store(false, std::memory_order_release);
}

void HealthMonitor::store_silent(Clock::time_point now, const Error& e) {
  int host = -1;
  std::string where;
  {
    std::lock_guard lock(mu_);
    host = store_host_rank_;
    where = store_where_;
  }
  const std::string store =
      where.empty() ? "the rendezvous store" : "the rendezvous store at " + where;
  if (!silent_since_) {
    // Silent since its last answer (or since the monitor started).
    silent_since_ = last_answer_.value_or(started_);
    silent_.store(true, std::memory_order_release);
    base::log().warn(
        "{}: {} does not answer ({}); failures cannot be announced through it; "
        "trying again every {} ms",
        who(settings_.rank), store, e.what(), kTick.count());
  }
  const auto silence = now - *silent_since_;
  if (abort_seen_ || host < 0 || host == settings_.rank ||
      settings_.heartbeat_timeout.count() <= 0 || silence < settings_.heartbeat_timeout)
    return;
  // The rank that hosts the store does not answer either: it stopped or died. Nobody can be told
  // through the store; every rank finds it out on its own.
  declare(
      base::AbortRecord{
          base::AbortRecord::Kind::peer_failed, settings_.rank, host,
          fmt::format("{} on host {}, which hosts {}, stopped answering: "
                      "nothing from the store for {} s (LOOM_HEARTBEAT_TIMEOUT)",
                      who(host), settings_.hosts.at(static_cast<std::size_t>(host)), store,
                      std::chrono::duration_cast<std::chrono::seconds>(silence).count())},
      false);
}

// This rank watches the next one still there: every rank is watched by one other, rank 0
// included, also after its watcher left on purpose (ranks that finish at different times).
void HealthMonitor::watch_heartbeat(Clock::time_point now) {
  if (watched_ == settings_.rank) return;  // every other rank has left
  const int watched = watched_;
  const std::int64_t beat = store_->add(store::keys::heartbeat(watched), 0);
  if (beat != watched_beat_) {
    watched_beat_ = beat;
    watched_since_ = now;
    return;
  }
  if (abort_seen_) return;
  // A beat missed for two ticks: the rank may have left on purpose; then its successor is this
  // rank's to watch (its own watcher may be the one that left).
  if (now - watched_since_ >= 2 * kTick &&
      store_->check({store::keys::departed(watched)}).front()) {
    watched_ = (watched + 1) % settings_.size;
    watched_beat_ = -1;
    watched_since_ = now;
    return;
  }
  if (now - watched_since_ < settings_.heartbeat_timeout) return;
  declare(base::AbortRecord{base::AbortRecord::Kind::peer_failed, settings_.rank, watched,
                            fmt::format(
                                "{} on host {} stopped responding: no heartbeat for {} s "
                                "(LOOM_HEARTBEAT_TIMEOUT; watched by {})",
                                who(watched), settings_.hosts.at(static_cast<std::size_t>(watched)),
                                settings_.heartbeat_timeout.count() / 1000, who(settings_.rank))},
          true);
}

// A failure this monitor found: tells the others through the store when asked and possible,
// and hands the record that stands over.
void HealthMonitor::declare(const base::AbortRecord& record, bool publish) {
  abort_seen_ = true;
  base::AbortRecord standing = record;
  if (publish) {
    try {
      standing = publish_abort(*store_, record);
      mark_seen();
    } catch (const Error& e) {
      base::log().warn("{}: cannot publish the failure: {}", who(settings_.rank), e.what());
    }
  }
  on_abort_(standing);
}

void HealthMonitor::watch_stalls(Clock::time_point now) {
  const std::uint64_t word = progress_.word.load(std::memory_order_relaxed);
  const bool in_call = progress_.in_call.load(std::memory_order_relaxed);
  if (word != seen_word_ || in_call != seen_in_call_) {
    seen_word_ = word, seen_in_call_ = in_call, seen_since_ = now;
  }
  // This rank's own call has waited long: say so, once per call.
  const bool collective = ((word >> 32) & 1) == 0;
  if (in_call && collective && word != reported_word_ &&
      now - seen_since_ >= settings_.stall_warn) {
    reported_word_ = word;
    store_->add(store::keys::stalls(), 1);
  }
  const std::int64_t stalls = store_->add(store::keys::stalls(), 0);
  if (stalls == stalls_seen_) return;
  stalls_seen_ = stalls;
  // Someone stalls: every rank says where it stands; rank 0 reports, at most once a period.
  store_->set(
      store::keys::progress(settings_.rank),
      fmt::format("{} {} {} {} {}", stalls, word, progress_.count.load(std::memory_order_relaxed),
                  in_call ? 1 : 0,
                  std::chrono::duration_cast<std::chrono::seconds>(now - seen_since_).count()));
  if (settings_.rank == 0 && now >= next_report_) {
    next_report_ = now + settings_.stall_warn;
    report_stall(stalls);
  }
}

// Rank 0: waits (a few ticks at most) for every rank to publish where it stands since the
// stall counter reached `stalls`, then reports.
void HealthMonitor::report_stall(std::int64_t stalls) {
  struct Where {
    std::uint64_t word = 0, count = 0;
    bool in_call = false, known = false;
    long long seconds = 0;
  };
  std::vector<Where> where(static_cast<std::size_t>(settings_.size));
  std::vector<std::string> keys;
  for (int r = 0; r < settings_.size; ++r) keys.push_back(store::keys::progress(r));
  std::uint64_t stalled_seq = 0;
  for (int attempt = 0; attempt < 5; ++attempt) {
    const auto present = store_->check(keys);
    bool all_current = true;
    stalled_seq = 0;
    for (int r = 0; r < settings_.size; ++r) {
      auto& w = where[static_cast<std::size_t>(r)];
      w = Where{};
      if (!present[static_cast<std::size_t>(r)]) {
        all_current = false;
        continue;
      }
      const std::string text =
          store_->get_string(keys[static_cast<std::size_t>(r)], std::chrono::seconds(5));
      int in_call = 0;
      long long seen_stalls = 0;
      unsigned long long word = 0, count = 0;
      if (std::sscanf(text.c_str(), "%lld %llu %llu %d %lld", &seen_stalls, &word, &count, &in_call,
                      &w.seconds) != 5)
        continue;
      w.word = word, w.count = count;
      w.known = true;
      w.in_call = in_call != 0;
      all_current &= seen_stalls >= stalls;
      if (w.in_call && ((w.word >> 32) & 1) == 0) stalled_seq = std::max(stalled_seq, w.word >> 33);
    }
    if (all_current) break;
    std::this_thread::sleep_for(kTick);  // the others publish on their next tick
  }
  std::vector<int> entered;
  std::vector<std::string> behind;
  std::string call;
  for (int r = 0; r < settings_.size; ++r) {
    const auto& w = where[static_cast<std::size_t>(r)];
    const std::uint64_t seq = w.word >> 33;
    if (w.known && seq == stalled_seq && w.in_call) {
      entered.push_back(r);
      if (call.empty()) call = algorithms::describe_tag(transport::Tag{w.word, w.count});
    } else if (w.known && seq > stalled_seq) {
      entered.push_back(r);
    } else {
      behind.push_back(w.known
                           ? fmt::format("rank {} (last: {}{}, {} s ago)", r,
                                         algorithms::describe_tag(transport::Tag{w.word, w.count}),
                                         w.in_call ? ", still in it" : ", finished", w.seconds)
                           : fmt::format("rank {} (no report)", r));
    }
  }
  const std::string text = fmt::format(
      "stall: {} has waited {} s or more: entered by rank(s) {}; not entered by {}",
      call.empty() ? fmt::format("collective #{}", stalled_seq) : call,
      settings_.stall_warn.count() / 1000, fmt::join(entered, ","),
      behind.empty() ? std::string("none") : fmt::format("{}", fmt::join(behind, "; ")));
  if (settings_.report)
    settings_.report(text);
  else
    base::log().warn("{}", text);
}

}  // namespace loom::core
