#include "core/health_monitor.hpp"

#include <cstdio>

#include <fmt/format.h>

#include "algorithms/collective.hpp"
#include "base/logging.hpp"
#include "core/failure_store.hpp"
#include "store/keys.hpp"

namespace loom::core {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kTick = std::chrono::milliseconds(500);
constexpr auto kBeat = std::chrono::seconds(1);
constexpr auto kHeartbeatCheck = std::chrono::seconds(2);

}  // namespace

HealthMonitor::HealthMonitor(std::shared_ptr<Store> store, Settings settings,
                             const Progress& progress,
                             std::function<void(const base::AbortRecord&)> on_abort)
    : store_(std::move(store)),
      settings_(std::move(settings)),
      progress_(progress),
      on_abort_(std::move(on_abort)),
      last_beat_(static_cast<std::size_t>(settings_.size), -1),
      last_change_(static_cast<std::size_t>(settings_.size), Clock::now()) {
  thread_ = std::thread([this] { loop(); });
}

HealthMonitor::~HealthMonitor() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void HealthMonitor::loop() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    lock.unlock();
    try {
      tick(Clock::now());
    } catch (const Error& e) {
      // The store is gone (its host finished or failed) or slow: the data connections still
      // report failures, so this only stops the watch.
      base::log().debug("health monitor: rank {}: {}; watching stops", settings_.rank, e.what());
      lock.lock();
      return;
    }
    lock.lock();
    wake_.wait_for(lock, kTick, [this] { return stop_; });
  }
}

void HealthMonitor::tick(Clock::time_point now) {
  if (!abort_seen_) {
    if (auto record = read_abort(*store_)) {
      abort_seen_ = true;
      on_abort_(*record);
    }
  }
  if (now >= next_beat_) {
    store_->add(store::keys::heartbeat(settings_.rank), 1);
    next_beat_ = now + kBeat;
  }
  if (settings_.rank == 0 && settings_.heartbeat_timeout.count() > 0 &&
      now >= next_heartbeat_check_) {
    watch_heartbeats(now);
    next_heartbeat_check_ = now + kHeartbeatCheck;
  }
  watch_stalls(now);
}

void HealthMonitor::watch_heartbeats(Clock::time_point now) {
  for (int r = 1; r < settings_.size; ++r) {
    const auto i = static_cast<std::size_t>(r);
    const std::int64_t beat = store_->add(store::keys::heartbeat(r), 0);
    if (beat != last_beat_[i]) {
      last_beat_[i] = beat;
      last_change_[i] = now;
      continue;
    }
    if (now - last_change_[i] < settings_.heartbeat_timeout || abort_seen_) continue;
    base::AbortRecord mine;
    mine.kind = base::AbortRecord::Kind::peer_failed;
    mine.reporter = 0;
    mine.failed = r;
    mine.cause = fmt::format(
        "rank {} on host {} stopped responding: no heartbeat for {} s (LOOM_HEARTBEAT_TIMEOUT)", r,
        settings_.hosts.at(i), settings_.heartbeat_timeout.count() / 1000);
    const base::AbortRecord standing = publish_abort(*store_, mine);
    abort_seen_ = true;
    on_abort_(standing);
    return;
  }
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
